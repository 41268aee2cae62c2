"""A test session leaves nothing of its own in the temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_test_session_removes_its_hugging_face_cache(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "HF_HOME"}
    env["TMPDIR"] = str(temp)
    session = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_shards.py", "-k", "hub"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert session.returncode == 0, session.stdout[-2000:]
    assert "3 passed" in session.stdout
    assert [p.name for p in temp.iterdir() if not p.name.startswith("pytest-of-")] == []
