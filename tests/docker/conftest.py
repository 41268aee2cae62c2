"""Container-tier fixtures: a Docker engine, the images built offline by the kit's own tooling."""

from __future__ import annotations

import functools

import pytest

from deploy.images import IMAGE, build_images, dangling_image_ids

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
    """The base image (debootstrap, no registry), the wheelhouse, and FLTest built with no network.

    Each stage prints a line as it ends (through ``progress``, not ``tier_report``: tests/ansible
    shares this fixture); the untagged images the build left behind, if any, are
    kept in ``pytestconfig.stash[DANGLING_MADE_BY_BUILD]`` for a test to check.
    """
    before = dangling_image_ids(docker_client)
    image = build_images(docker_client, pip_source="wheelhouse", report=functools.partial(progress, TIER))
    pytestconfig.stash[DANGLING_MADE_BY_BUILD] = dangling_image_ids(docker_client) - before
    assert IMAGE in image.tags
    return image
