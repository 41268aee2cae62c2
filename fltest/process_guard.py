"""Run a command whose processes all end when it ends, or when the fltest process that started it dies.

The NVFlare simulator starts its clients' workers with ``setsid``; stopping the simulator leaves
them running, and if fltest itself is killed outright (``kill -9``, an out-of-memory kill) nothing
would stop the simulator either. fltest therefore starts the simulator through this guard:

    python -m fltest.process_guard <command ...>

The guard becomes the *subreaper* of the command's descendants (a worker whose parent exits is
re-parented to the guard, not to init), runs the command, and once the command has exited or the
guard's parent is gone, stops every descendant (SIGTERM, then SIGKILL). Its exit code is the
command's (``128 + N`` for a command killed by signal N).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import psutil

MODULE = "fltest.process_guard"  # this module, as ``python -m`` runs it
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
POLL_S = 0.5
STOP_GRACE_S = 5.0
# For the processes of a run that reported its end (every round in): what is left is the framework's teardown, which
# waits for nothing FLTest needs (Flower's Ray shuts its node processes down 1 s a process type, ray/_private/node.py;
# NVFlare's simulator ends its clients about 9 s after its last round). They end within about 1 s of SIGTERM or are
# killed.
ENDED_RUN_GRACE_S = 1.0


def become_subreaper() -> None:
    """Make orphaned descendants of this process its children again (Linux ``prctl``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def stop_processes(processes: Sequence[psutil.Process], grace_s: float = STOP_GRACE_S) -> None:
    """Terminate ``processes``, then kill those left after ``grace_s``."""
    alive = [p for p in processes if p.is_running()]
    for process in alive:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)


def guarded(command: Sequence[str]) -> list[str]:
    """The command line that runs ``command`` under this guard, with this Python."""
    return [sys.executable, "-m", MODULE, *command]


def main(command: Sequence[str]) -> int:
    """Run ``command`` until it exits or this process's parent dies; stop all descendants; its exit code."""
    parent = os.getppid()
    become_subreaper()
    child = subprocess.Popen(command)
    code = child.poll()
    while code is None and os.getppid() == parent:
        time.sleep(POLL_S)
        code = child.poll()
    stop_processes(psutil.Process().children(recursive=True))
    if code is None:  # the parent died first: the command was stopped above
        code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
