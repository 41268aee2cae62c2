"""Build the kit's images with no registry: the base image, the wheelhouse, the FLTest image."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fltest import __version__
from fltest.errors import FLTestError, InputError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BASE_IMAGE = "fltest-base:bookworm"
IMAGE = f"fltest:{__version__}"


def build_base_image(client, tag: str = DEFAULT_BASE_IMAGE) -> None:
    """Build the debootstrap base image unless it exists (needs root for debootstrap)."""
    if client.images.list(name=tag):
        return
    if os.geteuid() != 0:
        raise InputError(f"base image {tag} is missing: build it as root with images/base/build-base-image.sh")
    subprocess.run(["bash", str(REPO / "images" / "base" / "build-base-image.sh"), tag], check=True)


def fill_wheelhouse() -> None:
    """Download every wheel the image needs into ``./wheelhouse`` (pip skips the ones present)."""
    subprocess.run(["bash", str(REPO / "images" / "fill-wheelhouse.sh")], check=True)


def build_fltest_image(client, pip_source: str = "wheelhouse", base_image: str = DEFAULT_BASE_IMAGE, tag: str = IMAGE):
    """Build the FLTest image, printing the build's steps; from the wheelhouse it builds with no network."""
    if pip_source not in ("wheelhouse", "pypi"):
        raise InputError(f"--pip-source: {pip_source!r}: expected wheelhouse or pypi")
    (REPO / "wheelhouse").mkdir(exist_ok=True)  # the Dockerfile copies it, empty for pypi
    stream = client.api.build(
        path=str(REPO),
        dockerfile="images/fltest/Dockerfile",
        tag=tag,
        buildargs={"PIP_SOURCE": pip_source, "BASE_IMAGE": base_image, "FLTEST_VERSION": __version__},
        network_mode="none" if pip_source == "wheelhouse" else None,
        rm=True,
        forcerm=True,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            raise FLTestError(f"image build failed: {chunk['error'].strip()}")
        line = chunk.get("stream", "").rstrip()
        if line.startswith("Step "):
            print(f"[build {tag}] {line}", file=sys.stderr, flush=True)
    return client.images.get(tag)


def build_images(client, pip_source: str = "wheelhouse", base_image: str | None = None):
    """Everything ``fltest-deploy build`` does: the base image if it is ours and missing, the wheelhouse, FLTest."""
    if base_image is None:
        build_base_image(client)
    if pip_source == "wheelhouse":
        fill_wheelhouse()
    return build_fltest_image(client, pip_source, base_image or DEFAULT_BASE_IMAGE)
