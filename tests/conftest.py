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

import pytest
import yaml

# The session's own folders, made in pytest_configure (before collection imports `datasets`, Ray or PyTorch), not
# when this module is imported: a script that imports a test module outside pytest leaves nothing in /tmp.
#  - HF_HOME: the Hugging Face cache, kept out of the user's;
#  - RAY_TMPDIR: Ray's session folders (logs, sockets) of the private and local clusters the tests start, instead of
#    the shared <tmp>/ray (kept short: Ray's socket paths must stay under 108 bytes);
#  - TORCHINDUCTOR_CACHE_DIR: PyTorch's compile cache, which torch makes as <tmp>/torchinductor_<user> even for a
#    model that never compiles (the torch tier).
# A variable given already is left as it is (and its folder is not removed).
SESSION_FOLDERS = {"HF_HOME": "fltest-hf-", "RAY_TMPDIR": "fltest-ray-", "TORCHINDUCTOR_CACHE_DIR": "fltest-torch-"}
_made: list[str] = []
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["tests.no_skip_in_ci"]  # in CI a skip fails

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "digits.yaml"


def pytest_configure(config: pytest.Config) -> None:
    """Give the session its own Hugging Face cache, Ray and PyTorch folders (:data:`SESSION_FOLDERS`)."""
    for variable, prefix in SESSION_FOLDERS.items():
        if variable not in os.environ:
            os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
            _made.append(os.environ[variable])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the folders :func:`pytest_configure` made: the tests leave nothing in /tmp."""
    for folder in _made:
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
