"""A test session leaves nothing of its own in the temporary folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def _session_in(temp: Path, *tests: str) -> str:
    """Run a pytest session of ``tests`` with ``temp`` as its temporary folder; its output."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("HF_HOME", "RAY_TMPDIR", "TORCHINDUCTOR_CACHE_DIR")
    }
    env["TMPDIR"] = str(temp)
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert session.returncode == 0, session.stdout[-2000:]
    return session.stdout


def test_a_test_session_removes_its_hugging_face_cache(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    assert "3 passed" in _session_in(temp, "tests/test_shards.py", "-k", "hub")
    assert [p.name for p in temp.iterdir() if not p.name.startswith("pytest-of-")] == []


def test_a_script_that_imports_a_test_module_makes_no_session_folder(tmp_path):
    """Outside pytest nothing removes them: a probe script importing tests/test_framework_strategies.py left the Hugging
    Face, Ray and PyTorch folders of a session that never ran in /tmp (2026-12-07)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("HF_HOME", "RAY_TMPDIR", "TORCHINDUCTOR_CACHE_DIR")
    }
    env["TMPDIR"] = str(tmp_path)
    subprocess.run([sys.executable, "-c", "import tests.conftest"], cwd=REPO, env=env, check=True, timeout=120)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.ray
def test_a_test_session_removes_the_ray_folders_it_made():
    temp = Path(
        tempfile.mkdtemp(prefix="ftl-", dir="/tmp")
    )  # short: Ray's socket paths under it must stay below 108 bytes
    try:
        assert "1 passed" in _session_in(temp, "tests/test_flwr.py", "-k", "private_run_matches")
        assert [
            p.name for p in temp.iterdir() if not p.name.startswith("pytest-of-")
        ] == []  # no ray/ (Ray's default), no session folder
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.torch
def test_a_torch_session_removes_pytorch_s_cache_folder(tmp_path):
    pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    temp = tmp_path / "tmp"
    temp.mkdir()
    assert "1 passed" in _session_in(temp, "tests/test_torch_model.py", "-k", "restores")
    assert [p.name for p in temp.iterdir() if not p.name.startswith("pytest-of-")] == []  # no torchinductor_<user>
