"""A private ``FLWR_HOME`` naming one SuperLink connection, and the ``flwr`` CLI run against it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from fltest.backends.flwr_deployment.loaded_cli import MODULE as LOADED_CLI
from fltest.errors import BackendUnavailable, RunFailed

CONNECTION = "fltest"


def connection_toml(address: str, root_certificates: str | None, name: str = CONNECTION) -> str:
    """The text of a ``config.toml`` whose default connection ``name`` is the SuperLink at ``address``: over TLS
    checked with ``root_certificates``, or, without them, in the clear (a simulation SuperLink on loopback)."""
    security = (
        f"root-certificates = {json.dumps(root_certificates)}\n"
        if root_certificates is not None
        else "insecure = true\n"
    )
    return f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\naddress = {json.dumps(address)}\n{security}'


def write_connection(flwr_home: Path, address: str, root_certificates: Path | None, name: str = CONNECTION) -> Path:
    """Write ``flwr_home/config.toml`` with the connection ``name`` (the default; TLS unless ``root_certificates`` is
    ``None``); returns its path."""
    flwr_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    ca = None if root_certificates is None else str(root_certificates.resolve())
    path.write_text(connection_toml(address, ca, name))
    return path


def flower_executable(name: str) -> str | None:
    """Flower's executable ``name`` (``flwr``, ``flower-superlink``) of this Python environment, else the one on
    ``PATH``; ``None`` when there is none."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


def flwr_cli() -> str:
    """The ``flwr`` executable of this Python environment (else the one on ``PATH``)."""
    found = flower_executable("flwr")
    if not found:
        raise BackendUnavailable("the flwr CLI is not installed: pip install 'flwr==1.42.0'")
    return found


def flwr_env(flwr_home: Path) -> dict[str, str]:
    """The environment for a ``flwr`` command using ``flwr_home``, its output unbuffered."""
    return {**os.environ, "FLWR_HOME": str(flwr_home), "PYTHONUNBUFFERED": "1"}


def flwr_what(args: tuple[str, ...]) -> str:
    """How a ``flwr`` command is named in an error line: ``supernode list``, ``run``..."""
    return " ".join(args[:2]) if args[0] == "supernode" else args[0]


def parse_answer(what: str, returncode: int, stdout: str, stderr: str) -> dict:
    """The JSON answer of ``flwr <what> --format json``, or a one-line :class:`RunFailed` with its reason."""
    try:
        answer = json.loads(stdout)
    except json.JSONDecodeError:
        lines = [line for line in (stderr or stdout).splitlines() if line.strip()]
        raise RunFailed(f"flwr {what}: {lines[-1] if lines else f'exit {returncode}'}") from None
    if not answer.get("success", False):
        lines = [line for line in str(answer.get("error-message", answer)).splitlines() if line.strip()]
        raise RunFailed(f"flwr {what}: {lines[-1] if lines else answer}")
    return answer


class LoadedFlwr:
    """A ``flwr`` process started now, with the connection in ``flwr_home``, that imports Flower's CLI and then waits
    for its command (:mod:`.loaded_cli`): started before a wait, the command's import overlaps it."""

    def __init__(self, flwr_home: Path) -> None:
        """Start it; without Flower's CLI, one line now."""
        flwr_cli()
        self._process = subprocess.Popen(
            [sys.executable, "-m", LOADED_CLI],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=flwr_env(flwr_home),
        )

    def give(self, command: list[str]) -> subprocess.Popen[str]:
        """Send it ``command`` (``flwr``'s arguments); the process, which now runs it (it takes one command)."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(command) + "\n")
            self._process.stdin.flush()  # the answer's communicate() closes it
        except BrokenPipeError:  # it ended before its command: its answer says why
            pass
        return self._process

    def cancel(self) -> None:
        """End it if it still runs (given no command, it ends by itself)."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.communicate()


class FlwrCall:
    """``flwr <args> --format json`` started now, in the background; :meth:`answer` waits for its answer."""

    def __init__(self, flwr_home: Path, *args: str, timeout: float = 60.0, loaded: LoadedFlwr | None = None) -> None:
        """Start the command with the connection in ``flwr_home`` (in ``loaded``, which has that connection already,
        when given); it may take ``timeout`` seconds from now."""
        self._what = flwr_what(args)
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        command = [*args, "--format", "json"]
        self._process = (
            loaded.give(command)
            if loaded is not None
            else subprocess.Popen(
                [flwr_cli(), *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=flwr_env(flwr_home),
            )
        )

    def answer(self) -> dict:
        """Its JSON answer, or a one-line :class:`RunFailed` (a failure, or no answer within the timeout)."""
        try:
            stdout, stderr = self._process.communicate(timeout=max(self._deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            self.cancel()
            raise RunFailed(f"flwr {self._what}: no answer within {self._timeout:.0f} s") from None
        return parse_answer(self._what, self._process.returncode, stdout, stderr)

    def cancel(self) -> None:
        """End the command if it still runs (its answer is no longer wanted)."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.communicate()


def flwr_json(flwr_home: Path, *args: str, timeout: float = 60.0, loaded: LoadedFlwr | None = None) -> dict:
    """Run ``flwr <args> --format json`` (in ``loaded``, when given); its answer, or a one-line :class:`RunFailed`."""
    call = FlwrCall(flwr_home, *args, timeout=timeout, loaded=loaded)
    try:
        return call.answer()
    finally:
        call.cancel()  # an interrupted wait leaves no flwr behind
