"""The README's test command: every tier, the Ansible tier beside the others.

``python -m tests.run_tiers [pytest options]`` runs two pytest sessions at once:

- the Ansible tier (``-m ansible``), whose time goes mostly to its emulated nodes (apt, image
  loads, SSH round trips), its lines printed as they come with ``[ansible] `` in front;
- the docker tier (``-m docker``), then every other tier (fast, ray, nvflare), on this
  terminal as usual. The tiers with tight timing bounds (a failing round's seconds) come last,
  after the container tiers have stopped competing with them (the Ansible tier ends first).

Both sessions share the images: ``fltest-deploy build`` takes a lock, so one builds and the
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

ANSIBLE_TIER = ["-m", "ansible"]
IN_TURN = [["-m", "docker"], ["-m", "not docker and not ansible"]]
ANSIBLE_PREFIX = "[ansible] "
REPORT = ["-ra", "--durations=30"]


def _pytest(markers: list[str], options: Sequence[str]) -> list[str]:
    """The pytest command of one session."""
    return [sys.executable, "-m", "pytest", *markers, *REPORT, *options]


def _relay(stream: TextIO, prefix: str, out: TextIO) -> None:
    """Copy ``stream`` to ``out`` line by line, each line with ``prefix`` in front."""
    for line in stream:
        out.write(prefix + line)
        out.flush()


def main(options: Sequence[str]) -> int:
    """Run the sessions; the first non-zero exit code, else 0."""
    ansible = subprocess.Popen(_pytest(ANSIBLE_TIER, options), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)  # fmt: skip
    relay = threading.Thread(target=_relay, args=(ansible.stdout, ANSIBLE_PREFIX, sys.stdout))
    relay.start()
    codes = []
    try:
        for markers in IN_TURN:
            codes.append(subprocess.run(_pytest(markers, options)).returncode)
        codes.append(ansible.wait())
    except KeyboardInterrupt:  # Ctrl-C reached both sessions too (one process group): let them tear down
        ansible.wait()
        codes.insert(0, 130)
    finally:
        relay.join()
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
