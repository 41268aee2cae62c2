"""A Flower run on a SuperLink as a transport of the run supervisor: its log stream, ``flwr ls`` and ``flwr stop``."""

from __future__ import annotations

import logging
import queue
import re
import subprocess
import threading
from pathlib import Path

from fltest.backends.flwr_deployment import channel
from fltest.backends.flwr_deployment.connection import CONNECTION, flwr_cli, flwr_env, flwr_json
from fltest.backends.supervision import Event, Failed, drain
from fltest.errors import RunFailed

log = logging.getLogger(__name__)

_EXCEPTION_LINE = re.compile(r"^\w*(Error|Exception)\b.*: ")  # a traceback's last line, e.g. from the ServerApp
STREAM_END_WAIT_S = 10.0  # for ``flwr log --stream`` to end by itself once the run is done


class FlowerRunTransport:
    """Follows Flower run ``run_id`` through ``flwr log <id> --stream`` (FLTest's ServerApp's lines); stops it with ``flwr stop``."""

    def __init__(
        self, flwr_home: Path, run_id: int, name: str | None = None, end_wait_s: float = STREAM_END_WAIT_S
    ) -> None:
        """Start reading the run's log with the connection in ``flwr_home``; ``name`` names it in failure lines, else
        ``Flower run <id>`` (a deployment's run, which its SuperLink lists), which also leads its ServerApp's failures.
        ``end_wait_s``: how long :meth:`close` lets the run end by itself after its last line (0 where the SuperLink
        is the run's own and stops next, with everything the run started)."""
        self.home = flwr_home
        self._end_wait_s = end_wait_s
        self.run_id = run_id
        self.name = name or f"Flower run {run_id}"
        self._failure_prefix = "" if name else f"{self.name}: "
        self._events: queue.Queue[Event] = queue.Queue()
        self._last_exception = ""
        command = [flwr_cli(), "log", str(run_id), CONNECTION, "--stream"]
        self._stream = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=flwr_env(flwr_home)
        )
        self._reader = threading.Thread(target=self._read, name=f"fltest-flwr-log-{run_id}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stream.stdout:
            event = channel.parse_line(line)
            if event is None:
                self._last_exception = line.strip() if _EXCEPTION_LINE.match(line) else self._last_exception
            else:
                self._events.put(Failed(self._failure_prefix + event.reason) if isinstance(event, Failed) else event)

    def events(self, wait_s: float) -> list[Event]:
        """The lines of FLTest's ServerApp since the last call, as events."""
        return drain(self._events, wait_s)

    def ended(self) -> str | None:
        """Once the log stream has ended with no end reported: the run's status (``ended (finished:failed)``)."""
        if self._reader.is_alive():
            return None
        return f"ended ({self.status()})"

    def detail(self) -> str:
        """The last exception line of the run's log (e.g. the ServerApp's), if any."""
        return self._last_exception

    def status(self) -> str:
        """The run's status as ``flwr ls`` reports it (``finished:completed``, ``running``, ...)."""
        try:
            runs = flwr_json(self.home, "ls", CONNECTION, "--run-id", str(self.run_id))["runs"]
        except RunFailed as exc:
            return f"unknown: {exc}"
        return str(runs[0].get("status", "unknown")) if runs else "unknown"

    @staticmethod
    def stop_run(flwr_home: Path, run_id: int) -> None:
        """Ask the SuperLink to stop Flower run ``run_id`` (a run that already ended is fine); a failure is logged."""
        try:
            flwr_json(flwr_home, "stop", str(run_id), CONNECTION)
        except RunFailed as exc:
            log.warning("%s", exc)

    def stop(self) -> None:
        """Ask the SuperLink to stop the run (a run that already ended is fine), and end the log stream."""
        self.stop_run(self.home, self.run_id)
        self._end_stream(0.0)

    def close(self) -> None:
        """Let the log stream end with the run, for up to the ``end_wait_s`` given."""
        self._end_stream(self._end_wait_s)

    def _end_stream(self, wait_s: float) -> None:
        try:
            self._stream.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass
        if self._stream.poll() is None:
            self._stream.kill()
        self._stream.wait()
        self._reader.join(STREAM_END_WAIT_S)
