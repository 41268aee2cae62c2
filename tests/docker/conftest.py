"""Container-tier fixtures: a Docker engine, the images built offline by the kit's own tooling."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest

from deploy.images import IMAGE

TIER = "docker tier"  # the prefix of this tier's progress lines


@pytest.fixture(scope="session")
def docker_client():
    """A Docker SDK client; the container tier skips, saying why, only where no engine answers."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises several types for "no engine"
        pytest.skip(f"no Docker engine answers: {exc}")
    return client


@pytest.fixture(scope="session")
def tier_report(progress):
    """``tier_report(text)`` prints ``[docker tier] text`` on the terminal at once."""
    return functools.partial(progress, TIER)


@pytest.fixture(scope="session")
def fltest_image(docker_client, progress):
    """The base image (debootstrap, no registry), the wheelhouse, and FLTest, built offline by ``fltest-deploy build``.

    The command runs as the README types it (it takes the host's build lock itself); each stage's line
    is shown as it ends (through ``progress``, not ``tier_report``: tests/ansible shares this fixture).
    That a build leaves no untagged image is tests/docker/test_image.py's rebuild test: this build finds
    the images present and does nothing, outside a cold engine.
    """
    build = subprocess.Popen(
        [sys.executable, "-m", "deploy", "build"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    errors = []
    for line in build.stderr:  # the stages' lines, then any error; stdout: the wheelhouse's summary and the final line
        stage = line.rstrip().removeprefix("[fltest-deploy build] ")
        if stage != line.rstrip():
            progress(TIER, stage)
        elif not line.startswith("[build "):  # docker build's "Step n/m" lines: not worth a terminal line each
            errors.append(line.rstrip())
    output = build.stdout.read()
    assert build.wait() == 0, f"fltest-deploy build failed: {errors}"
    assert re.fullmatch(rf"built {re.escape(IMAGE)} \(\d+ MB\)", output.splitlines()[-1]), output
    return docker_client.images.get(IMAGE)
