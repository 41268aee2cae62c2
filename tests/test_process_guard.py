"""fltest.process_guard, which runs the NVFlare simulator: its command ends when the guard's parent dies, within POLL_S."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from fltest.process_guard import POLL_S

# The guarded command: on SIGTERM it writes the (system-wide) monotonic time it got it, and exits.
COMMAND = """
import signal, sys, time
from pathlib import Path
def stop(signum, frame):
    Path(sys.argv[1]).write_text(repr(time.monotonic()))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
Path(sys.argv[2]).write_text("ready")
time.sleep(600)
"""
# fltest's stand-in: starts the guard with the command, then waits to be killed.
PARENT = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-m', 'fltest.process_guard', *sys.argv[1:]]); time.sleep(600)"
SCHEDULING_S = 0.5  # a loaded 2-core machine's delay in waking the guard and delivering the signal


def _wait_for(path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path.name} not written within {timeout} s"
        time.sleep(0.02)
    return path.read_text()


def test_the_command_gets_sigterm_within_half_a_second_of_fltest_killed_outright(tmp_path):
    """The README's promise: killed with ``kill -9``, fltest's guard sees its parent gone within 0.5 s and stops the simulator."""
    assert POLL_S <= 0.5
    stopped, ready = tmp_path / "stopped", tmp_path / "ready"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, sys.executable, "-c", COMMAND, str(stopped), str(ready)])
    try:
        _wait_for(ready, 60)
        killed = time.monotonic()
        os.kill(parent.pid, signal.SIGKILL)
        terminated = float(_wait_for(stopped, 30))
    finally:
        parent.kill()
        parent.wait()
    assert terminated - killed < POLL_S + SCHEDULING_S, f"SIGTERM came {terminated - killed:.2f} s after the kill"
