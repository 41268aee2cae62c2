"""Container-tier fixtures: a Docker engine, the images built offline by the kit's own tooling."""

from __future__ import annotations

import pytest

from deploy.images import IMAGE, build_images


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
def fltest_image(docker_client):
    """The base image (debootstrap, no registry), the wheelhouse, and FLTest built with no network."""
    image = build_images(docker_client, pip_source="wheelhouse")
    assert IMAGE in image.tags
    return image
