"""A private ``FLWR_HOME`` naming one SuperLink connection, and the ``flwr`` CLI run against it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fltest.errors import BackendUnavailable, RunFailed

CONNECTION = "fltest"


def write_connection(flwr_home: Path, address: str, root_certificates: Path, name: str = CONNECTION) -> Path:
    """Write ``flwr_home/config.toml`` with the TLS connection ``name`` (the default); returns its path."""
    flwr_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    path.write_text(
        f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\naddress = {json.dumps(address)}\n'
        f"root-certificates = {json.dumps(str(root_certificates.resolve()))}\n"
    )
    return path


def flwr_cli() -> str:
    """The ``flwr`` executable of this Python environment (else the one on ``PATH``)."""
    beside = Path(sys.executable).parent / "flwr"
    found = str(beside) if beside.is_file() else shutil.which("flwr")
    if not found:
        raise BackendUnavailable("the flwr CLI is not installed: pip install 'flwr==1.42.0'")
    return found


def flwr_env(flwr_home: Path) -> dict[str, str]:
    """The environment for a ``flwr`` command using ``flwr_home``, its output unbuffered."""
    return {**os.environ, "FLWR_HOME": str(flwr_home), "PYTHONUNBUFFERED": "1"}


def flwr_json(flwr_home: Path, *args: str, timeout: float = 60.0) -> dict:
    """Run ``flwr <args> --format json``; its answer, or a one-line :class:`RunFailed`."""
    command = [flwr_cli(), *args, "--format", "json"]
    what = " ".join(args[:2]) if args[0] == "supernode" else args[0]
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=flwr_env(flwr_home), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"flwr {what}: no answer within {timeout:.0f} s") from None
    try:
        answer = json.loads(result.stdout)
    except json.JSONDecodeError:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise RunFailed(f"flwr {what}: {lines[-1] if lines else f'exit {result.returncode}'}") from None
    if not answer.get("success", False):
        lines = [line for line in str(answer.get("error-message", answer)).splitlines() if line.strip()]
        raise RunFailed(f"flwr {what}: {lines[-1] if lines else answer}")
    return answer
