"""A simulation SuperLink of one run's own: ``flower-superlink --simulation`` on a free loopback port.

Flower 1.42 runs a simulation as ``flwr run`` on a SuperLink started with ``--simulation``: the
SuperLink starts a SuperExec, which starts ``flwr-simulation`` for the run; that process runs the
ServerApp and Flower's Ray backend, which starts the ClientApps as Ray actors (a private Ray, or the
cluster ``RAY_ADDRESS`` names). FLTest starts one SuperLink a run, in a folder of its own (its Flower
home, its state), on a port nobody else uses, with runtime dependency installation off (the App's
components are the installed fltest's), and stops it, with every process it started, when the run
ends, fails or is stopped.

The SuperLink runs in a session of its own, so that a Ctrl-C in the terminal reaches fltest only,
which stops the Flower run first, then the SuperLink; and under :mod:`fltest.process_guard`, the
subreaper of everything it starts (its SuperExec starts itself in yet another session), which ends
all of it when fltest itself is killed outright.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from fltest.backends.flwr_deployment.connection import flower_executable
from fltest.backends.pythonpath import driver_pythonpath
from fltest.errors import RunFailed
from fltest.process_guard import STOP_GRACE_S, guarded, stop_processes

HOST = "127.0.0.1"  # reachable by this machine's user only: the Control API runs any App it is sent
START_TIMEOUT_S = 60.0  # for the SuperLink to answer its health check (about 2 s here, idle)
STOP_WAIT_S = 10.0  # for the guard to end once what it guarded was stopped
SUPERLINK = "flower-superlink"  # the executable, in the venv's bin
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # Flower colours its log levels
_ERROR_LINE = re.compile(r"\bERROR\b\s*(?:\[[\w.]+\])?\s*:?\s*(?P<message>.+)")  # Flower's and uvicorn's error lines
LOG_FILE = "superlink.log"
# Flower's own settings for a process that runs what it is told, offline: nothing is installed at run
# time (the App's components are the installed fltest's), no update check, no telemetry.
FLOWER_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
}


def _free_port() -> int:
    """A TCP port free on :data:`HOST` now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _executable(name: str) -> str:
    """``name``'s path in this Python environment's ``bin``, else on ``PATH``; a run fails in one line without it."""
    found = flower_executable(name)
    if not found:
        raise RunFailed(
            f"{name}: not found beside {sys.executable} nor on PATH: Flower's simulation needs it "
            "(pip install 'flwr[simulation]==1.42.0')"
        )
    return found


class SimulationSuperLink:
    """``flower-superlink --insecure --simulation`` on a free port of :data:`HOST`, its state in ``folder``."""

    def __init__(self, folder: Path, ray_address: str) -> None:
        """Describe it: its home and state under ``folder``; its simulations run on the Ray at ``ray_address``
        (``local``: a Ray of the run's own)."""
        self.folder = folder
        self.port = _free_port()
        self.address = f"{HOST}:{self.port}"
        self.log_path = folder / LOG_FILE
        self._ray_address = ray_address
        self._guard: subprocess.Popen[bytes] | None = None  # the process guard, whose command is the SuperLink
        self._answered = False  # it answered its health check once

    def environment(self) -> dict[str, str]:
        """The SuperLink's environment: Flower offline and quiet, the Ray to use, the driver's import path."""
        return {
            **os.environ,
            **FLOWER_ENV,
            "FLWR_HOME": str(self.folder / "flwr-home"),
            "RAY_ADDRESS": self._ray_address,
            "PYTHONPATH": driver_pythonpath(),  # the user's modules, where the driver finds them
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }

    def start(self) -> None:
        """Start the SuperLink and wait until it answers; a SuperLink that does not start fails in one line."""
        command = guarded(
            [
                _executable(SUPERLINK),
                "--insecure",
                "--simulation",
                "--disable-runtime-dependency-installation",
                f"--host={HOST}",
                f"--port={self.port}",
                f"--database={self.folder / 'state.db'}",
            ]
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._guard = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
            )
        self._wait_until_healthy()

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = f"http://{self.address}/health"
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
        while time.monotonic() < deadline:
            if self._guard.poll() is not None:
                raise RunFailed(
                    f"the simulation SuperLink on {self.address} did not start (exit {self._guard.returncode}): "
                    f"{self.reason()}"
                )
            try:
                with direct.open(url, timeout=2.0) as answer:
                    if answer.status == 200:
                        self._answered = True
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RunFailed(
            f"the simulation SuperLink on {self.address} did not answer within {START_TIMEOUT_S:g} s: {self.reason()}"
        )

    def ended(self) -> str | None:
        """Once the SuperLink ended on its own after it started, one line saying so; else ``None``."""
        if not self._answered or self._guard is None or self._guard.poll() is None:
            return None
        return f"the simulation SuperLink on {self.address} ended (exit {self._guard.returncode}): {self.reason()}"

    def reason(self) -> str:
        """The SuperLink's last error in its output (its reason when it did not start), else its last line."""
        try:
            text = _COLOUR.sub("", self.log_path.read_text(errors="replace"))
        except OSError:
            return "no output"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [match["message"] for line in lines if (match := _ERROR_LINE.search(line))]
        return errors[-1] if errors else (lines[-1] if lines else "no output")

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """End the SuperLink, its SuperExec and the simulation processes they started: SIGTERM, then SIGKILL to those
        left after ``grace_s`` (:data:`ENDED_RUN_GRACE_S` once the run reported its end)."""
        if self._guard is None:
            return
        try:
            started = psutil.Process(self._guard.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            started = []
        stop_processes(started, grace_s)  # the guard then ends, its command gone
        try:
            self._guard.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._guard.kill()
            self._guard.wait()
        self._guard = None
