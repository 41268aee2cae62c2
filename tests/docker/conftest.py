"""Container-tier fixtures: a Docker engine, the base image and the FLTest image, built here offline."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO

IMAGE_TAG = "fltest:0.1.0"


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
    """Build the base image (debootstrap, no registry), fill the wheelhouse, build FLTest with no network."""
    subprocess.run(["bash", str(REPO / "images" / "base" / "build-base-image.sh")], check=True)
    subprocess.run(["bash", str(REPO / "images" / "fill-wheelhouse.sh")], check=True)
    image, _ = docker_client.images.build(
        path=str(REPO),
        dockerfile="images/fltest/Dockerfile",
        tag=IMAGE_TAG,
        buildargs={"PIP_SOURCE": "wheelhouse"},
        network_mode="none",  # offline: every package must come from the wheelhouse
        rm=True,
        forcerm=True,
    )
    return image
