"""``python -m deploy.node.runs list|stop``: the ``fltest run`` processes of this container, and stopping them.

Run inside a node container (``docker exec``), as its user: ``fltest-deploy run/stop/down`` and
Ansible's ``run.yml``/``stop.yml`` find an experiment still running in the Ray head with ``list``
and stop it with ``stop``, which sends it SIGINT, as Ctrl-C would: fltest stops the framework
(the Flower simulation, its SuperLink and Ray actors; NVFlare's simulator), records the rounds so far with a
summary saying ``interrupted`` and exits 130. A process still there after ``--timeout`` seconds is
killed. Both print one JSON list, a run an element (``pid``, ``run_id``, ``config``, ``started``;
``stop`` adds ``outcome``: ``stopped`` or ``killed``). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

PROC = Path("/proc")
STOP_TIMEOUT_S = 30.0
POLL_S = 0.2


@dataclass(frozen=True)
class RunProcess:
    """One ``fltest run`` process: its pid, the staged run's id (its config's folder), its config, when it started."""

    pid: int
    run_id: str
    config: str
    started: float  # seconds since the epoch


def run_config(argv: list[str]) -> str | None:
    """The config of an ``fltest run <config> ...`` command line (the console script, or ``-m fltest.cli``), else ``None``."""
    for index, arg in enumerate(argv):
        if PurePosixPath(arg).name == "fltest":
            rest = argv[index + 1 :]
        elif arg == "-m" and argv[index + 1 : index + 2] == ["fltest.cli"]:
            rest = argv[index + 2 :]
        else:
            continue
        return rest[1] if len(rest) > 1 and rest[0] == "run" else None
    return None


def _started(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch (its start in clock ticks after boot, ``/proc/stat``'s btime)."""
    ticks = int((PROC / str(pid) / "stat").read_text().rsplit(") ", 1)[1].split()[19])
    boot = next(int(line.split()[1]) for line in (PROC / "stat").read_text().splitlines() if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def fltest_runs() -> list[RunProcess]:
    """The ``fltest run`` processes of this container (its process namespace), oldest first."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            config = run_config(argv)
            if config is not None:
                found.append(
                    RunProcess(int(entry.name), PurePosixPath(config).parent.name, config, _started(int(entry.name)))
                )
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone meanwhile, or not ours to read
            continue
    return sorted(found, key=lambda run: run.started)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purpose
        return (PROC / str(pid) / "stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_runs(runs: list[RunProcess], timeout_s: float = STOP_TIMEOUT_S) -> dict[int, str]:
    """SIGINT each of ``runs``; kill those still there after ``timeout_s``; returns ``{pid: "stopped"|"killed"}``."""
    for run in runs:
        try:
            os.kill(run.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while any(_alive(run.pid) for run in runs) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    outcomes = {}
    for run in runs:
        outcomes[run.pid] = "stopped"
        if _alive(run.pid):
            os.kill(run.pid, signal.SIGKILL)
            outcomes[run.pid] = "killed"
    return outcomes


def main(argv: list[str] | None = None) -> int:
    """``list``, or ``stop [--run-id ID] [--timeout S]``; prints the runs as JSON."""
    parser = argparse.ArgumentParser(prog="python -m deploy.node.runs", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the fltest run processes of this container")
    stop = sub.add_parser("stop", help="SIGINT them (as Ctrl-C), kill what is left after --timeout")
    stop.add_argument("--run-id", help="only the run staged as runs/<id>/ (default: every run)")
    stop.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S)
    args = parser.parse_args(argv)
    runs = fltest_runs()
    if args.command == "list":
        print(json.dumps([asdict(run) for run in runs]))
        return 0
    runs = [run for run in runs if args.run_id in (None, run.run_id)]
    outcomes = stop_runs(runs, args.timeout)
    print(json.dumps([{**asdict(run), "outcome": outcomes[run.pid]} for run in runs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
