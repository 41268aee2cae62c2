"""The compose emulation as a project: its settings, the compose CLI around it, its containers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fltest.errors import FLTestError, InputError

COMPOSE_DIR = Path(__file__).resolve().parent.parent / "compose"
DEFAULT_PROJECT = "fltest"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
HEAD_SERVICE = "ray-head"
WORKER_SERVICE = "ray-worker"
RAY_TEMP = "/tmp/ray"  # each node's Ray sessions and logs: an anonymous volume (docker-compose.yml's &ray-temp)
STOP_TIMEOUT_S = 45  # above Ray's 30 s drain, as the compose file's stop_grace_period
COMPOSE_FILE = "docker-compose.yml"
DASHBOARD_FILE = "dashboard.yml"  # the Ray dashboard opt-in, an override of COMPOSE_FILE


def compose_cli() -> list[str]:
    """``docker compose`` (v2) where the plugin answers, else ``docker-compose`` (1.29)."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise InputError("no compose tool: install the docker compose plugin or docker-compose")


def dotenv_value(path: Path, key: str) -> str | None:
    """The value of ``key`` in a compose ``.env`` file (``KEY=value`` lines), if set."""
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None


REASON_MAX_CHARS = 300
_GENERIC_LINES = ("Encountered errors while bringing up the project.",)


def compose_reason(stderr: str) -> str:
    """Compose's own reason for a failure, as one trimmed line: its last error line, else its last line.

    docker-compose 1.29 repeats ``ERROR: for <container>  <reason>`` per container and service and
    ends with a generic line; compose v2 ends with ``Error response from daemon: <reason>``.
    """
    lines = [re.sub(r"^ERROR: (for \S+\s+)?", "", line.strip()) for line in stderr.splitlines()]
    lines = [" ".join(line.split()) for line in lines if line.strip() and line.strip() not in _GENERIC_LINES]
    errors = [line for line in lines if re.match(r"(?i)(error|cannot|service |container |invalid)", line)]
    reason = (errors or lines or [""])[-1]
    return reason if len(reason) <= REASON_MAX_CHARS else reason[: REASON_MAX_CHARS - 3] + "..."


def run_compose(command: list[str], tool: list[str], verb: str, project: str, cwd: Path,
                env: dict[str, str]) -> subprocess.CompletedProcess:  # fmt: skip
    """Run the compose ``command`` (``tool`` ... ``verb`` ...), its output captured; a failure raises one line.

    The line names the tool, the verb, the project and compose's own reason (:func:`compose_reason`).
    """
    result = subprocess.run(command, cwd=cwd, env=env, text=True, capture_output=True)
    if result.returncode != 0:
        reason = compose_reason(result.stderr) or "no reason given"
        raise FLTestError(f"{' '.join(tool)} {verb} (project {project}) failed (exit {result.returncode}): {reason}")
    return result


@dataclass(frozen=True)
class ClusterShape:
    """What the compose settings ask for: the node count and the CPUs of each node."""

    head_cpus: float
    workers: int
    worker_cpus: float
    worker_cpu_total: float | None = None  # when the workers' CPUs differ (containers as they are)

    @property
    def nodes(self) -> int:
        """Head plus workers."""
        return 1 + self.workers

    @property
    def cpus(self) -> float:
        """Total logical CPUs of the cluster."""
        workers = self.workers * self.worker_cpus if self.worker_cpu_total is None else self.worker_cpu_total
        return self.head_cpus + workers


@dataclass
class ComposeProject:
    """The compose emulation in ``directory``, under project ``name``, with settings ``overrides``."""

    directory: Path = COMPOSE_DIR
    name: str = ""
    overrides: Mapping[str, str] = field(default_factory=dict)
    dashboard: bool = False  # with DASHBOARD_FILE: the head's Ray dashboard on the host's 127.0.0.1

    def __post_init__(self) -> None:
        """Resolve the project name: the environment, then the folder's ``.env``, then ``fltest``."""
        if not self.name:
            self.name = (
                os.environ.get("COMPOSE_PROJECT_NAME")
                or dotenv_value(self.directory / ".env", "COMPOSE_PROJECT_NAME")
                or DEFAULT_PROJECT
            )

    def setting(self, key: str) -> str | None:
        """A setting's effective value: an override, the environment, then the ``.env`` file."""
        return self.overrides.get(key) or os.environ.get(key) or dotenv_value(self.directory / ".env", key)

    def compose(self, *args: str, dashboard: bool | None = None) -> subprocess.CompletedProcess:
        """Run the compose CLI on this project, its output captured; a failure raises one line with compose's reason.

        ``dashboard``: add the dashboard override file (default: :attr:`dashboard`).
        """
        tool = compose_cli()
        files = [COMPOSE_FILE] + ([DASHBOARD_FILE] if (self.dashboard if dashboard is None else dashboard) else [])
        command = [*tool, "--project-name", self.name, "--project-directory", str(self.directory),
                   *(arg for name in files for arg in ("-f", str(self.directory / name))), *args]  # fmt: skip
        env = {**os.environ, **self.overrides, "COMPOSE_PROJECT_NAME": self.name}
        return run_compose(command, tool, args[0], self.name, cwd=self.directory, env=env)

    def shape(self) -> ClusterShape:
        """The node count and CPUs the settings give, read from compose's own resolved config."""
        services = yaml.safe_load(self.compose("config").stdout)["services"]
        head, worker = services[HEAD_SERVICE], services[WORKER_SERVICE]
        workers = worker.get("scale", worker.get("deploy", {}).get("replicas", 1))
        return ClusterShape(head_cpus=float(head["cpus"]), workers=int(workers), worker_cpus=float(worker["cpus"]))

    def deployed_shape(self, client) -> ClusterShape | None:
        """The shape of the node containers the project has (running or stopped), or ``None`` if it has no head.

        ``status`` and ``wait`` check this, the cluster that was brought up (``up --workers 4``),
        not the settings; each node's CPUs are its container's CPU quota (= Ray's ``--num-cpus``).
        """
        heads = self.containers(client, HEAD_SERVICE, include_stopped=True)
        if not heads:
            return None
        workers = self.containers(client, WORKER_SERVICE, include_stopped=True)
        cpus = [c.attrs["HostConfig"]["NanoCpus"] / 1e9 for c in workers]
        return ClusterShape(head_cpus=heads[0].attrs["HostConfig"]["NanoCpus"] / 1e9, workers=len(workers),
                            worker_cpus=max(cpus, default=0.0), worker_cpu_total=sum(cpus))  # fmt: skip

    def containers(self, client, service: str | None = None, include_stopped: bool = False) -> list:
        """The project's containers (of one service), oldest first."""
        labels = [f"{PROJECT_LABEL}={self.name}"] + ([f"{SERVICE_LABEL}={service}"] if service else [])
        found = client.containers.list(all=include_stopped, filters={"label": labels})
        return sorted(found, key=lambda c: c.attrs["Created"])

    def head(self, client):
        """The running head container; raises a one-line error if there is none."""
        heads = self.containers(client, HEAD_SERVICE)
        if not heads:
            raise FLTestError(f"project {self.name}: no running {HEAD_SERVICE} container (run: fltest-deploy up)")
        return heads[0]

    def leftovers(self, client) -> list[str]:
        """Containers, networks and volumes of the project that still exist."""
        labels = {"label": f"{PROJECT_LABEL}={self.name}"}
        return (
            [f"container {c.name}" for c in client.containers.list(all=True, filters=labels)]
            + [f"network {n.name}" for n in client.networks.list(filters=labels)]
            + [f"volume {v.name}" for v in client.volumes.list(filters=labels)]
        )

    def up(self, client) -> None:
        """Create or restore every service (restarting stopped or killed containers); without :attr:`dashboard`,
        a dashboard an earlier ``up --dashboard`` started is removed.

        A smaller ``RAY_WORKERS`` removes the extra workers, and their ``/tmp/ray`` volumes with them
        (compose 1.29 keeps a removed container's anonymous volumes, which ``down`` no longer finds).
        """
        import docker

        before = self.ray_temp_volumes(client)
        workers = self.setting("RAY_WORKERS") or "1"
        self.compose("up", "--detach", "--remove-orphans", "--scale", f"{WORKER_SERVICE}={workers}")
        for name in before - self.ray_temp_volumes(client):
            try:
                client.volumes.get(name).remove()
            except docker.errors.DockerException:  # already gone, or still in use: down --volumes removes it
                pass

    def ray_temp_volumes(self, client) -> set[str]:
        """The names of the anonymous volumes the project's nodes keep ``/tmp/ray`` in."""
        return {mount["Name"] for container in self.containers(client, include_stopped=True)
                for mount in container.attrs["Mounts"] if mount["Type"] == "volume" and mount["Destination"] == RAY_TEMP}  # fmt: skip

    def down(self) -> None:
        """Stop and remove the project's containers, networks and volumes (the dashboard's too, if it ran)."""
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", str(STOP_TIMEOUT_S), dashboard=True)


def remove_project(project, client) -> None:
    """``project.down()``, then fail naming whatever of the project is still there (containers, networks, volumes).

    ``project`` is a :class:`ComposeProject` or anything with ``name``, ``down()`` and ``leftovers(client)``.
    """
    project.down()
    left = project.leftovers(client)
    if left:
        raise FLTestError(f"project {project.name}: still present after down: {', '.join(left)}")
