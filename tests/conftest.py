"""Shared fixtures: an isolated Hugging Face cache and small configs."""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Before anything imports `datasets`: keep the test session's cache out of the user's
# (a folder of this session's own, removed when it ends, unless HF_HOME was given).
SESSION_HF_HOME = None if "HF_HOME" in os.environ else tempfile.mkdtemp(prefix="fltest-hf-")
if SESSION_HF_HOME:
    os.environ["HF_HOME"] = SESSION_HF_HOME
# Likewise Ray's session folders (logs, sockets) of the private and local clusters the tests start:
# in a folder of this session's own instead of the shared <tmp>/ray (kept short: Ray's socket paths
# must stay under 108 bytes).
SESSION_RAY_TMPDIR = None if "RAY_TMPDIR" in os.environ else tempfile.mkdtemp(prefix="fltest-ray-")
if SESSION_RAY_TMPDIR:
    os.environ["RAY_TMPDIR"] = SESSION_RAY_TMPDIR
# Likewise PyTorch's compile cache, which torch makes as <tmp>/torchinductor_<user> even for a model
# that never compiles (the torch tier).
SESSION_TORCH_CACHE = None if "TORCHINDUCTOR_CACHE_DIR" in os.environ else tempfile.mkdtemp(prefix="fltest-torch-")
if SESSION_TORCH_CACHE:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = SESSION_TORCH_CACHE
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import yaml  # noqa: E402

pytest_plugins = ["tests.no_skip_in_ci"]  # in CI a skip fails

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "digits.yaml"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's own Hugging Face cache, Ray and PyTorch folders: the tests leave nothing in /tmp."""
    for folder in (SESSION_HF_HOME, SESSION_RAY_TMPDIR, SESSION_TORCH_CACHE):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def failing_round_seconds(run_dir: Path) -> float:
    """Seconds from the last round a run recorded to its end: its failing round, after start-up and set-up."""
    from fltest.results.files import (  # here: nothing may import datasets before HF_HOME is set
        read_json_object,
        read_jsonl,
    )

    return read_json_object(run_dir / "timings.json")["wall_s"] - read_jsonl(run_dir / "metrics.jsonl")[-1]["elapsed_s"]


def base_config() -> dict:
    """The example config as a dict with its reference run only (fast), to be changed by a test."""
    config = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    config["runs"] = [run for run in config["runs"] if run["framework"] == "reference"]
    return config


@pytest.fixture
def write_config(tmp_path: Path):
    """Write a config dict as YAML in tmp_path (with the example's hooks module beside it)."""
    (tmp_path / "digits_hooks.py").write_text((REPO / "examples" / "digits_hooks.py").read_text())

    def write(data: dict, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return path

    return write


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the shard cache at an empty folder for this test (the variable the datasets library reads at import)."""
    folder = tmp_path / "hf-datasets"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(folder))
    return folder


@pytest.fixture(scope="session")
def progress(pytestconfig: pytest.Config):
    """``progress(tier, text)`` prints ``[tier] text`` on the terminal at once, even while pytest captures output.

    The slow tiers report each stage (image build, nodes up) with it, so that minutes of work do not look hung.
    """
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    terminal = pytestconfig.pluginmanager.getplugin("terminalreporter")

    def report(tier: str, text: str) -> None:
        line = f"[{tier}] {text}"
        if terminal is None:  # -p no:terminal
            print(line, file=sys.__stderr__, flush=True)
            return
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            terminal.write_line(line)
            terminal.flush()

    return report


@pytest.fixture
def compose_tool() -> list[str]:
    """The compose tool's command (``docker compose`` or ``docker-compose``); a test that needs one skips without it
    (a machine with no Docker, such as the pythons tier's Debian container), and fails in CI."""
    from deploy.compose import compose_cli
    from fltest.errors import InputError

    try:
        return compose_cli()
    except InputError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site as CI builds it (``mkdocs build --strict``), once a session: its folder."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    folder = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)]
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder
