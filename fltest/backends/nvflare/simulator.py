"""The NVFlare simulator as a subprocess fltest owns: started in its own session, always stopped.

The simulator starts a worker process per running client with ``setsid``, so the
workers leave the simulator's process group; this module keeps a list of every
descendant it has seen and stops them all by their id. The simulator runs under
:mod:`fltest.process_guard`, which stops all of them too if fltest is killed outright.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import psutil

from fltest.backends.pythonpath import driver_pythonpath
from fltest.process_guard import STOP_GRACE_S, guarded, stop_processes

#: NVFlare's simulator command line, started through FLTest's launcher (a start-up race closed: see that module).
SIMULATOR_LAUNCHER = "fltest.backends.nvflare.launch_simulator"
# What NVFlare's simulator logs when a worker process it started never listened for it (simulator_runner.py)
WORKER_LOST = "Failed to create connection to the child process"
# An error line of the simulator's concise log (``<time> - ERROR - <message>``) or a traceback's last line.
_ERROR_LINE = re.compile(r"^(?:.* - ERROR - (?P<logged>.*)|(?P<raised>[A-Za-z_][\w.]*(?:Error|Exception)\b.*))$")


class SimulatorProcess:
    """NVFlare's ``simulator <job> -w <workspace> -n <clients> -t <threads>`` (through :data:`SIMULATOR_LAUNCHER`), logging to a file."""

    def __init__(
        self, job_dir: Path, workspace: Path, clients: int, threads: int, log_path: Path, env: Mapping[str, str]
    ) -> None:
        """Describe the run; :meth:`start` (or entering the ``with`` block) starts it."""
        self.command = guarded(  # the simulator's processes end with fltest, however it ends
            [
                sys.executable,
                "-m",
                SIMULATOR_LAUNCHER,
                str(job_dir),
                "-w",
                str(workspace),
                "-n",
                str(clients),
                "-t",
                str(threads),
                "-m",
                str(max(clients, 100)),  # the simulator refuses more clients than this (default 100)
                "-l",
                "concise",
            ]
        )
        self.log_path = log_path
        self.env = dict(env)
        self._process: subprocess.Popen | None = None
        self._seen: dict[int, psutil.Process] = {}
        self._log_start = 0  # where this start's output begins in the log

    def start(self) -> None:
        """Start the simulator in a new session, its output going to the log file (after what an earlier start wrote)."""
        self._log_start = self.log_path.stat().st_size if self.log_path.is_file() else 0
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self._seen[self._process.pid] = psutil.Process(self._process.pid)

    def _track(self) -> None:
        """Remember every live descendant (a worker outlives its parent's knowledge of it once orphaned)."""
        try:
            for child in psutil.Process(self._process.pid).children(recursive=True):
                self._seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def poll(self) -> int | None:
        """The simulator's exit code, or ``None`` while it runs."""
        self._track()
        return self._process.poll()

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the simulator to exit; its exit code or ``None``."""
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Terminate the simulator and every descendant seen, then kill whatever is left after ``grace_s``."""
        if self._process is None:
            return
        self._track()
        stop_processes(list(self._seen.values()), grace_s)
        self._process.poll()  # reap it

    def lost_a_worker(self) -> bool:
        """Whether this start of the simulator logged a worker process that never connected (:func:`worker_lost`)."""
        return worker_lost(self.log_path, self._log_start)

    def last_error(self) -> str | None:
        """The last error in the log: a logged ``ERROR`` message or the last line of a traceback."""
        if not self.log_path.is_file():
            return None
        lines = self.log_path.read_text(errors="replace").splitlines()
        errors = [m for line in lines if (m := _ERROR_LINE.match(line))]
        if not errors:
            return None
        last = errors[-1]
        return (last["logged"] or last["raised"]).strip(" :")

    def __enter__(self) -> SimulatorProcess:
        """Start the simulator."""
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        """Stop it, whatever happened."""
        self.stop()


def simulator_environment(tmp: Path, spec_path: Path, spec_variable: str) -> dict[str, str]:
    """The simulator's environment: this driver's ``sys.path`` (fltest, hooks), a private ``TMPDIR``, the spec."""
    env = dict(os.environ)
    env["PYTHONPATH"] = driver_pythonpath()
    env["TMPDIR"] = str(tmp)
    env[spec_variable] = str(spec_path)
    return env


def worker_lost(log_path: Path, since: int = 0) -> bool:
    """Whether the simulator's log, from byte ``since``, says that one of its worker processes never connected (so its
    client never ran)."""
    if not log_path.is_file():
        return False
    with log_path.open("rb") as log:
        log.seek(since)
        return WORKER_LOST.encode() in log.read()
