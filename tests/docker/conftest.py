"""Container-tier fixtures: a Docker engine, the images built offline by the kit's own tooling."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import pytest

from deploy.images import IMAGE, LOCK_HELD, dangling_image_ids, one_build_at_a_time

TIER = "docker tier"  # the prefix of this tier's progress lines
DANGLING_MADE_BY_BUILD = pytest.StashKey[set]()


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
def fltest_image(docker_client, progress, pytestconfig):
    """The base image (debootstrap, no registry), the wheelhouse, and FLTest, built offline by ``fltest-deploy build``.

    The command runs as the README types it; each stage's line is shown as it ends (through
    ``progress``, not ``tier_report``: tests/ansible shares this fixture). The untagged images
    the build left behind, if any, are kept in ``pytestconfig.stash[DANGLING_MADE_BY_BUILD]``
    for a test to check. The fixture holds the host's build lock, which every image build of the
    kit and its tests takes, from the first count to the second (the command is told so:
    ``LOCK_HELD``), so no other session's build, whose step in progress is untagged, comes between.
    """
    report = functools.partial(progress, TIER)
    with one_build_at_a_time(report):  # no other build between the two counts: its step in progress is untagged
        before = dangling_image_ids(docker_client)
        build = subprocess.Popen([sys.executable, "-m", "deploy", "build"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, LOCK_HELD: "1"})  # fmt: skip
        errors = []
        for line in build.stderr:  # the stages' lines, then any error; stdout: the wheelhouse's summary and the final line
            stage = line.rstrip().removeprefix("[fltest-deploy build] ")
            if stage != line.rstrip():
                progress(TIER, stage)
            elif not line.startswith("[build "):  # docker build's "Step n/m" lines: not worth a terminal line each
                errors.append(line.rstrip())
        output = build.stdout.read()
        assert build.wait() == 0, f"fltest-deploy build failed: {errors}"
        pytestconfig.stash[DANGLING_MADE_BY_BUILD] = dangling_image_ids(docker_client) - before
    assert re.fullmatch(rf"built {re.escape(IMAGE)} \(\d+ MB\)", output.splitlines()[-1]), output
    return docker_client.images.get(IMAGE)
