"""tests/tools/plant_bugs.py as a developer runs it: a planted bug is caught by its covering tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_a_planted_bug_is_caught_by_its_covering_tests():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (the pythons tier's copy of the files): the tool copies what git lists")
    done = subprocess.run(
        [sys.executable, "-m", "tests.tools.plant_bugs", "--only", "results-dir"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("caught   --results-dir ignored (fltest/cli.py; ") and lines[-1] == "1 of 1 caught"
