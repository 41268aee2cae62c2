"""The Ray emulation's compose project: a head and workers (``compose/docker-compose.yml``), their shape and volumes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import yaml

from deploy.compose import ComposeProject
from fltest.errors import FLTestError

HEAD_SERVICE = "ray-head"
WORKER_SERVICE = "ray-worker"
RAY_TEMP = "/tmp/ray"  # each node's Ray sessions and logs: an anonymous volume (docker-compose.yml's &ray-temp)
COMPOSE_FILE = "docker-compose.yml"
DASHBOARD_FILE = "dashboard.yml"  # the Ray dashboard opt-in, an override of COMPOSE_FILE


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
class RayEmulation(ComposeProject):
    """The Ray cluster emulation in ``directory`` (settings in its ``.env``), under project ``name``."""

    dashboard: bool = False  # with DASHBOARD_FILE: the head's Ray dashboard on the host's 127.0.0.1

    default_name: ClassVar[str] = "fltest"
    stop_timeout_s: ClassVar[int] = 45  # above Ray's 30 s drain, as the compose file's stop_grace_period

    def compose_files(self) -> list[Path]:
        """The cluster's compose file, with the dashboard override when :attr:`dashboard` is set."""
        return [self.directory / COMPOSE_FILE] + ([self.directory / DASHBOARD_FILE] if self.dashboard else [])

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

    def head(self, client):
        """The running head container; raises a one-line error if there is none."""
        heads = self.containers(client, HEAD_SERVICE)
        if not heads:
            raise FLTestError(f"project {self.name}: no running {HEAD_SERVICE} container (run: fltest-deploy up)")
        return heads[0]

    def up(self, client) -> None:
        """Create or restore every service (restarting stopped or killed containers); without :attr:`dashboard`,
        a dashboard an earlier ``up --dashboard`` started is removed.

        A smaller ``RAY_WORKERS`` removes the extra workers, and their ``/tmp/ray`` volumes with them
        (compose 1.29 keeps a removed container's anonymous volumes, which ``down`` no longer finds).
        """
        import docker

        before = self.ray_temp_volumes(client)
        workers = self.setting("RAY_WORKERS", "1")
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

    def down(self, files: list[Path] | None = None) -> None:
        """Stop and remove the project's containers, networks and volumes (the dashboard's too, if it ran)."""
        super().down(files or [self.directory / COMPOSE_FILE, self.directory / DASHBOARD_FILE])
