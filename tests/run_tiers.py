"""The README's test command: every tier, in three lines of pytest sessions that run at once.

``python -m tests.run_tiers [pytest options]`` runs, at the same time:

- the docker tier, then the PyTorch image variant's tests (``-m "docker and torch"``: its 6 GB
  build and the CNN example on its cluster), their lines as pytest prints them. The two sessions that
  build and start containers the most follow each other on one line instead of running beside each other;
- the tiers without Docker (fast, ray, nvflare, torch), their lines printed with ``[beside] `` in
  front. They need no image. After them, on the same line, the pythons tier (``-m pythons``): README
  command 1 and the fast tier on a Debian 13 container (Python 3.13), constraints.txt resolved for
  Python 3.12 and 3.14 (the line that ends first: the lines end within minutes of each other);
- the Ansible tier (``-m ansible``), its lines with ``[ansible] `` in front. It waits for the image
  the docker tier builds (``fltest-deploy build`` takes a lock: one builds, the others find it
  built), then spends most of its time waiting on its emulated nodes (apt, image loads over SSH,
  containers starting): beside the other two it no longer waits for the tiers without Docker first.

Every line a session prints is written whole (no session's partial line runs into another's).
Every session reports its skips and failures (``-ra``) and its 30 slowest tests (where the next
minutes of CI time are); the options given (``-x``, ``-k``, ...) go to every session too; markers
(``-m``) do not belong here: run ``python -m pytest -m <tier>`` for one tier. The exit code is the
first failing session's (pytest's own code: 1 failed, 5 nothing ran, ...), else 0. Plain
``python -m pytest`` still runs every tier, one after the other.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

# The fast tier: what needs neither Ray, NVFlare, PyTorch nor a Docker engine (the pythons tier runs it on Python 3.13).
FAST_TIER = "not ray and not docker and not ansible and not nvflare and not torch and not pythons"
# Each line of sessions runs beside the others, its sessions one after the other; the key goes before every line
# its sessions print. The docker line's two sessions build and start containers the most.
LINES = {
    "": [["-m", "docker and not torch"], ["-m", "docker and torch"]],
    "[beside] ": [["-m", "not docker and not ansible and not pythons"], ["-m", "pythons"]],
    "[ansible] ": [["-m", "ansible"]],
}
REPORT = ["-ra", "--durations=30"]
INTERRUPTED = 2  # pytest's exit code for a session stopped by Ctrl-C (pytest.ExitCode.INTERRUPTED)


def _pytest(markers: list[str], options: Sequence[str]) -> list[str]:
    """The pytest command of one session."""
    return [sys.executable, "-m", "pytest", *markers, *REPORT, *options]


def _relay(stream: TextIO, prefix: str, out: TextIO, lock: threading.Lock) -> None:
    """Copy ``stream`` to ``out`` line by line, each line with ``prefix`` in front, written whole under ``lock``.

    A session's own partial line (pytest's ``collecting ...``) ends in its line, never in another session's.
    """
    for line in stream:
        with lock:
            out.write(prefix + line)
            out.flush()


def _line_of_sessions(
    prefix: str, sessions: list[list[str]], options: Sequence[str], codes: list[int], lock: threading.Lock
) -> None:
    """Run ``sessions`` one after the other, their output relayed with ``prefix``; their codes into ``codes``."""
    for markers in sessions:
        session = subprocess.Popen(
            _pytest(markers, options), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        _relay(session.stdout, prefix, sys.stdout, lock)
        codes.append(session.wait())
        if codes[-1] == INTERRUPTED:  # Ctrl-C: start no further session
            return


def main(options: Sequence[str]) -> int:
    """Run the sessions; the first non-zero exit code (in the order of :data:`LINES`), else 0."""
    codes: dict[str, list[int]] = {prefix: [] for prefix in LINES}
    lock = threading.Lock()
    lines = [
        threading.Thread(target=_line_of_sessions, args=(prefix, sessions, options, codes[prefix], lock))
        for prefix, sessions in LINES.items()
    ]
    for line in lines:
        line.start()
    interrupted = []
    while any(line.is_alive() for line in lines):
        try:
            for line in lines:
                line.join()
        except KeyboardInterrupt:  # Ctrl-C reached every session too (one process group): let them tear down
            interrupted = [130]
    return next((code for code in [*interrupted, *(c for prefix in LINES for c in codes[prefix])] if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
