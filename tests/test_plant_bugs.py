"""tests/tools/plant_bugs.py as docs/how-to/tests.md runs it: every planted bug is caught by its covering tests.

It runs every bug of the list (about 4 minutes): a test weakened later fails here. The pythons tier's copy of
the files is no git checkout, which the tool copies from: it skips there (outside CI).
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from tests.doc_blocks import doc_block, run_block
from tests.tools.plant_bugs import BUGS


def test_every_planted_bug_is_caught_by_its_covering_tests():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (the pythons tier's copy of the files): the tool copies what git lists")
    done = run_block(doc_block("tests/plant-bugs"), cwd=REPO, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [re.sub(r" \([^()]*; \d+ s\)$", "", line) for line in lines[:-1]] == [
        f"caught   {bug.name}" for bug in BUGS
    ], lines
    assert lines[-1] == f"{len(BUGS)} of {len(BUGS)} caught"
