"""The README's test command: every tier, in two lines of pytest sessions that run at once.

``python -m tests.run_tiers [pytest options]`` runs, at the same time:

- beside: the tiers without Docker (fast, ray, nvflare, torch), then the Ansible tier (``-m
  ansible``); their lines are printed as they come with ``[beside] `` in front. The tiers without
  Docker need no image, so they run while the other line builds it (11 minutes from a cold engine
  in CI), time the Ansible tier spent waiting for that image when it came first; by their end the
  image is there;
- in turn: the docker tier, then the PyTorch image variant's tests (``-m "docker and torch"``:
  its 6 GB build and the CNN example on its cluster, about 8 minutes), on this terminal as usual.
  The two sessions that build and start containers the most follow each other on one line
  instead of running beside each other.

The sessions share the images: ``fltest-deploy build`` takes a lock, so one builds and the
other finds them built. Every session reports its skips and failures (``-ra``) and its 30 slowest
tests (where the next minutes of CI time are); the options given (``-x``, ``-k``, ...) go to every
session too; markers (``-m``) do not belong here: run ``python -m pytest -m <tier>`` for one tier.
The exit code is the first failing session's (pytest's own code: 1 failed, 5 nothing ran, ...),
else 0. Plain ``python -m pytest`` still runs every tier, one after the other.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

BESIDE = [["-m", "not docker and not ansible"], ["-m", "ansible"]]  # one session after the other, beside IN_TURN
IN_TURN = [["-m", "docker and not torch"], ["-m", "docker and torch"]]
BESIDE_PREFIX = "[beside] "
REPORT = ["-ra", "--durations=30"]
INTERRUPTED = 2  # pytest's exit code for a session stopped by Ctrl-C (pytest.ExitCode.INTERRUPTED)


def _pytest(markers: list[str], options: Sequence[str]) -> list[str]:
    """The pytest command of one session."""
    return [sys.executable, "-m", "pytest", *markers, *REPORT, *options]


def _relay(stream: TextIO, prefix: str, out: TextIO) -> None:
    """Copy ``stream`` to ``out`` line by line, each line with ``prefix`` in front."""
    for line in stream:
        out.write(prefix + line)
        out.flush()


def _beside(options: Sequence[str], codes: list[int]) -> None:
    """Run the BESIDE sessions one after the other, their output relayed with BESIDE_PREFIX; their codes into ``codes``."""
    for markers in BESIDE:
        session = subprocess.Popen(_pytest(markers, options), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, bufsize=1)  # fmt: skip
        _relay(session.stdout, BESIDE_PREFIX, sys.stdout)
        codes.append(session.wait())
        if codes[-1] == INTERRUPTED:  # Ctrl-C: start no further session
            return


def main(options: Sequence[str]) -> int:
    """Run the sessions; the first non-zero exit code, else 0."""
    beside_codes: list[int] = []
    beside = threading.Thread(target=_beside, args=(options, beside_codes))
    beside.start()
    codes = []
    try:
        for markers in IN_TURN:
            codes.append(subprocess.run(_pytest(markers, options)).returncode)
        beside.join()
    except KeyboardInterrupt:  # Ctrl-C reached every session too (one process group): let them tear down
        beside.join()
        codes.insert(0, 130)
    return next((code for code in [*codes, *beside_codes] if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
