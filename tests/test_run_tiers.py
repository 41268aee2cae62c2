"""docs/how-to/tests.md's promises about the tiers: ``tests.run_tiers`` runs every session, each line of
the side sessions with its prefix, and exits with the first failing session's code; outside CI the
docker and Ansible tiers skip only where no Docker engine answers."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

# One test a session of tests.run_tiers selects, each ending its session with the exit code named for it in
# $FAILING (pytest.exit), or passing.
TIER_TESTS = """
import os
import pytest

FAILING = dict(item.split(":") for item in os.environ["FAILING"].split(",") if item)


def end(session):
    if session in FAILING:
        pytest.exit(f"{session} fails", returncode=int(FAILING[session]))


@pytest.mark.docker
def test_docker():
    end("docker")


@pytest.mark.docker
@pytest.mark.torch
def test_docker_torch():
    end("docker-torch")


def test_beside():
    end("beside")


@pytest.mark.pythons
def test_pythons():
    end("pythons")


@pytest.mark.ansible
def test_ansible():
    end("ansible")
"""


SESSION_TESTS = [
    ("", "test_docker"),
    ("", "test_docker_torch"),
    ("[beside] ", "test_beside"),
    ("[beside] ", "test_pythons"),
    ("[ansible] ", "test_ansible"),
]


def _run_tiers(folder, failing: str) -> subprocess.CompletedProcess:
    """``python -m tests.run_tiers`` on the tier tests in ``folder``, the sessions in $FAILING exiting with their codes."""
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker\n    torch\n    pythons\n    ansible\n")
    (folder / "test_tiers.py").write_text(TIER_TESTS)
    return subprocess.run(
        [sys.executable, "-m", "tests.run_tiers", "-v", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,  # pytest.ini there: the sessions collect the folder's tests only
        env={**os.environ, "FAILING": failing, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "failing, exit_code",
    [
        ("", 0),
        ("ansible:4", 4),
        ("ansible:4,pythons:3", 3),  # the [beside] line's sessions come before the Ansible tier's
        ("ansible:4,docker-torch:6", 6),  # the docker line's before both
    ],
)
def test_run_tiers_runs_every_session_and_exits_with_the_first_failing_one_s_code(tmp_path, failing, exit_code):
    done = _run_tiers(tmp_path, failing)
    assert done.returncode == exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for prefix, test in SESSION_TESTS:  # every session ran, its lines whole and with its line's prefix
        assert any(line.startswith(f"{prefix}test_tiers.py::{test} ") for line in lines), (test, done.stdout)


def test_outside_ci_the_docker_and_ansible_tiers_skip_only_where_no_engine_answers():
    """With no engine at DOCKER_HOST and CI unset, every test of both tiers that needs one is skipped, saying so
    (or, on a machine without Docker such as the pythons tier's Debian container, no compose tool either: the only
    reasons a test of theirs skips); none fails."""
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "docker or ansible",
            "tests/docker",
            "tests/ansible",
            "-ra",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        env={**env, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and " skipped" in summary, done.stdout[-3000:]
    assert "failed" not in summary and "error" not in summary, done.stdout[-3000:]  # those that need no engine pass
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(re.search(r": no Docker engine answers|: no compose tool: ", line) for line in skips), skips
