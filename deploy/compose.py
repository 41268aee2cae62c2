"""One compose wrapper for both emulations: a project's settings file, the compose CLI around it, its containers.

The Ray emulation (:mod:`deploy.ray_emulation.project`) and the Flower emulation
(:mod:`deploy.flower_emulation.federation`) are compose projects of this kind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from deploy.kit import KIT_FILE, env_file_values
from fltest.errors import FLTestError, InputError

COMPOSE_DIR = Path(__file__).resolve().parent.parent / "compose"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"


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
    return env_file_values(path).get(key) if path.is_file() else None


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


def run_compose(
    command: list[str], tool: list[str], verb: str, project: str, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess:
    """Run the compose ``command`` (``tool`` ... ``verb`` ...), its output captured; a failure raises one line.

    The line names the tool, the verb, the project and compose's own reason (:func:`compose_reason`).
    """
    result = subprocess.run(command, cwd=cwd, env=env, text=True, capture_output=True)
    if result.returncode != 0:
        reason = compose_reason(result.stderr) or "no reason given"
        raise FLTestError(f"{' '.join(tool)} {verb} (project {project}) failed (exit {result.returncode}): {reason}")
    return result


@dataclass
class ComposeProject:
    """A compose project in ``directory`` under ``name``: its settings file, its compose files, its containers.

    Settings resolve as compose resolves them: ``overrides``, then the environment, then
    :attr:`env_file` in ``directory``, then the kit's shared values (``deploy/kit.env``: the
    image, the container user, folders, ports), which compose gets through :meth:`environment`.
    Subclasses name their files (:meth:`compose_files`).
    """

    directory: Path = COMPOSE_DIR
    name: str = ""
    overrides: Mapping[str, str] = field(default_factory=dict)

    env_file: ClassVar[str] = ".env"
    default_name: ClassVar[str] = "fltest"
    stop_timeout_s: ClassVar[int] = 10

    def __post_init__(self) -> None:
        """Resolve the project name: ``COMPOSE_PROJECT_NAME`` as a setting, else :attr:`default_name`."""
        self.name = self.name or self.setting("COMPOSE_PROJECT_NAME") or self.default_name

    def setting(self, key: str, default: str | None = None) -> str | None:
        """A setting's effective value: an override, the environment, :attr:`env_file`, the kit file, then ``default``."""
        return (
            self.overrides.get(key)
            or os.environ.get(key)
            or dotenv_value(self.directory / self.env_file, key)
            or env_file_values(KIT_FILE).get(key)
            or default
        )

    def required(self, key: str, default: str | None = None) -> str:
        """:meth:`setting`, or an :class:`InputError` naming the settings file when it is not set."""
        value = self.setting(key, default)
        if not value:
            raise InputError(f"{self.directory / self.env_file}: {key} is not set")
        return value

    def compose_files(self) -> list[Path]:
        """The compose files of the project, in override order."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The compose CLI's environment: the kit's values, this process's environment, the overrides, the project name.

        A kit value that :attr:`env_file` sets too is left to the file (compose prefers the
        environment to its env file).
        """
        settings_file = self.directory / self.env_file
        file_values = env_file_values(settings_file) if settings_file.is_file() else {}
        kit = {key: value for key, value in env_file_values(KIT_FILE).items() if key not in file_values}
        return {**kit, **os.environ, **self.overrides, "COMPOSE_PROJECT_NAME": self.name}

    def compose_command(
        self, *args: str, tool: list[str] | None = None, files: list[Path] | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The compose CLI command (``tool``, by default :func:`compose_cli`) on ``files`` (default
        :meth:`compose_files`) with ``args``, and its environment."""
        env_file = self.directory / self.env_file
        command = [
            *(tool or compose_cli()),
            "--project-name",
            self.name,
            "--project-directory",
            str(self.directory),
            *(["--env-file", str(env_file)] if env_file.is_file() else []),
            *(arg for path in (files or self.compose_files()) for arg in ("-f", str(path))),
            *args,
        ]
        return command, self.environment()

    def compose(self, *args: str, files: list[Path] | None = None) -> subprocess.CompletedProcess:
        """Run the compose CLI on this project, its output captured; a failure raises one line with compose's reason."""
        tool = compose_cli()
        command, env = self.compose_command(*args, tool=tool, files=files)
        return run_compose(command, tool, args[0], self.name, cwd=self.directory, env=env)

    def containers(self, client, service: str | None = None, include_stopped: bool = False) -> list:
        """The project's containers (of one service), oldest first."""
        labels = [f"{PROJECT_LABEL}={self.name}"] + ([f"{SERVICE_LABEL}={service}"] if service else [])
        found = client.containers.list(all=include_stopped, filters={"label": labels})
        return sorted(found, key=lambda c: c.attrs["Created"])

    def leftovers(self, client) -> list[str]:
        """Containers, networks and volumes of the project that still exist."""
        labels = {"label": f"{PROJECT_LABEL}={self.name}"}
        return (
            [f"container {c.name}" for c in client.containers.list(all=True, filters=labels)]
            + [f"network {n.name}" for n in client.networks.list(filters=labels)]
            + [f"volume {v.name}" for v in client.volumes.list(filters=labels)]
        )

    def down(self, files: list[Path] | None = None) -> None:
        """Stop and remove the project's containers, networks and volumes."""
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", str(self.stop_timeout_s), files=files)

    def remove(self, client) -> None:
        """:meth:`down`, then fail naming whatever of the project is still there (containers, networks, volumes)."""
        self.down()
        left = self.leftovers(client)
        if left:
            raise FLTestError(f"project {self.name}: still present after down: {', '.join(left)}")
