"""The FLTest image, built offline from the wheelhouse, run as a user would run it."""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import docker
import pytest

from deploy.compose import COMPOSE_DIR, dotenv_value
from deploy.images import (
    FLTEST_LABEL,
    IMAGE,
    build_fltest_image,
    build_tags,
    copy_build_context,
    dangling_image_ids,
    link_or_copy,
    remove_build,
)
from deploy.kit import KIT
from deploy.pki.supernode_keys import PRIVATE_NAME, ensure_key
from tests.conftest import REPO
from tests.doc_blocks import doc_block, run_block, user_checkout
from tests.docker.streams import find_in_stream, private_key_markers

pytestmark = pytest.mark.docker

REBUILD_TAG = "fltest-rebuild-test:1"  # apart from fltest:0.1.0, which other tiers use meanwhile
REBUILD_USER = "fltest-rebuild-test-user"  # a container of the image a rebuild moves its tag from
FORCE_TAG = "fltest-base-force-test:1"  # apart from the kit's base image, which every build uses


def _run(client, image, command, **kwargs) -> str:
    output = client.containers.run(image.id, command, remove=True, network_mode="none", **kwargs)
    return output.decode().strip()


def test_image_runs_as_non_root_with_the_fixed_paths(docker_client, fltest_image):
    assert fltest_image.attrs["Config"]["User"] == "fltest"
    out = _run(
        docker_client,
        fltest_image,
        [
            "python",
            "-c",
            "import os, platform, sys, fltest; print(os.getuid(), sys.prefix, fltest.__file__, platform.python_version())",
        ],
    )
    uid, prefix, module, python = out.split()
    assert python.rsplit(".", 1)[0] == KIT.image_python  # the kit's Debian release's Python (deploy/kit.env)
    assert uid != "0"
    assert prefix == "/opt/fltest/.venv"
    assert module == "/opt/fltest/app/fltest/__init__.py"
    assert fltest_image.labels["org.opencontainers.image.version"] == "0.1.0"
    environment = dict(item.split("=", 1) for item in fltest_image.attrs["Config"]["Env"])
    assert (environment["HF_HOME"], environment["HF_HUB_OFFLINE"]) == (f"{KIT.home}/hf", "1")  # images.md


def test_the_dashboard_s_packages_are_on_the_path_only_when_asked_for(docker_client, fltest_image):
    """images.md: Ray's dashboard packages (its ``default`` extra) are in the image apart from the venv, importable
    only with /opt/fltest/dashboard on the path (a head started with --dashboard)."""
    probe = ["python", "-c", "import importlib.util; print(importlib.util.find_spec('aiohttp_cors') is not None)"]
    assert _run(docker_client, fltest_image, probe) == "False"
    assert _run(docker_client, fltest_image, probe, environment={"PYTHONPATH": "/opt/fltest/dashboard"}) == "True"


def test_fltest_runs_the_cluster_example_inside_and_writes_results_on_the_host(docker_client, fltest_image, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the container's non-root user writes here
    _run(
        docker_client,
        fltest_image,
        [
            "fltest",
            "run",
            "/examples/cluster.yaml",
            "--results-dir",
            "/results",
        ],  # no FLTEST_RAY_ADDRESS: a private Ray
        volumes={
            str(REPO / "examples"): {"bind": "/examples", "mode": "ro"},
            str(results): {"bind": "/results", "mode": "rw"},
        },
        shm_size="512m",  # Ray's object store (Docker's default /dev/shm is 64 MB)
    )
    for run in ("reference", "flower"):
        summary = json.loads((results / "digits-cluster" / run / "summary.json").read_text())
        assert summary["status"] == "completed", summary
        assert summary["final"]["accuracy"] > 0.85
    comparison = json.loads((results / "digits-cluster" / "comparison.json").read_text())
    assert comparison["runs"][1]["max_param_diff_vs_reference"] <= 1e-9
    assert (results / "digits-cluster" / "report.png").is_file()


def _describe(client, image_ids) -> list[str]:
    return [f"{i[7:19]} created {client.images.get(i).attrs['Created']}" for i in sorted(image_ids)]


def _stand_in_build(client, tag: str) -> list[str]:
    """Tag ``tag`` and its stages' tags on images of their own, as a previous build of ``tag`` would leave them.

    Each is a one-file image imported from a tar (a distinct id that only its one tag holds),
    made in a fraction of a second instead of a build of its own.
    """
    ids = []
    for name in build_tags(tag):
        content = f"stand-in for {name}\n".encode()
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo("stand-in")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        repository, version = name.rsplit(":", 1)
        label = [f"LABEL {FLTEST_LABEL}"] if name == tag else []  # the final stage's, as the Dockerfile sets it
        client.api.import_image_from_data(archive.getvalue(), repository=repository, tag=version, changes=label)
        ids.append(client.images.get(name).id)
    return ids


def _kit_secret(env_file: str, key: str) -> Path:
    """Where a checkout's kit writes a secret by default (a setting of compose/.env or compose/flower.env), from the checkout's root."""
    return (COMPOSE_DIR / dotenv_value(COMPOSE_DIR / env_file, key)).resolve().relative_to(REPO)


def test_a_rebuild_after_a_change_leaves_no_untagged_image(docker_client, fltest_image, tier_report, tmp_path):
    """A rebuild after a one-line change in fltest/: every tag moves from the previous build's, which is gone (the
    final image a container still uses, at the next build), and no untagged image is left; the image shares every
    layer with the kit's image but the last two, the code's (images.md, upgrading.md).

    The Ray token, the SuperLink's TLS keys and a SuperNode's key pair (made by the kit's own key code), present where
    the kit's settings put them in the checkout when the image is built, are in none of its layers.
    """
    context = copy_build_context(tmp_path / "context")
    canaries = {
        _kit_secret(".env", "RAY_TOKEN_FILE"): f"fltest-canary-{secrets.token_hex(16)}".encode(),
        _kit_secret("flower.env", "FLOWER_TLS_DIR")
        / "superlink"
        / "superlink.key": f"fltest-canary-{secrets.token_hex(16)}".encode(),
        _kit_secret("flower.env", "FLOWER_TLS_DIR")
        / "ca"
        / "ca.key": f"fltest-canary-{secrets.token_hex(16)}".encode(),
    }
    for name, canary in canaries.items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_bytes(canary + b"\n")
    ensure_key(context / _kit_secret("flower.env", "FLOWER_KEYS_DIR"), "supernode-0")
    markers = [
        *canaries.values(),
        *private_key_markers(context / _kit_secret("flower.env", "FLOWER_KEYS_DIR") / "supernode-0" / PRIVATE_NAME),
    ]
    before = dangling_image_ids(docker_client)
    try:
        previous = _stand_in_build(docker_client, REBUILD_TAG)
        user = docker_client.containers.create(
            previous[-1], command=["stand-in"], name=REBUILD_USER
        )  # of the old image
        with (context / "fltest" / "__init__.py").open("a") as handle:
            handle.write("# a one-line change\n")

        def build():
            build_fltest_image(
                docker_client, tag=REBUILD_TAG, context=context, report=lambda line: tier_report(f"rebuild: {line}")
            )

        build()
        left = dangling_image_ids(docker_client) - before
        assert left == {previous[-1]}, f"the rebuild left untagged images: {_describe(docker_client, left)}"
        for tag, old in zip(build_tags(REBUILD_TAG), previous):
            assert docker_client.images.get(tag).id != old, f"{tag} did not move"
            if old != previous[-1]:
                with pytest.raises(docker.errors.ImageNotFound):
                    docker_client.images.get(old)  # the image the tag moved from
        user.remove()  # upgrading.md: the image a container still used goes at the next build
        build()
        left = dangling_image_ids(docker_client) - before
        assert not left, f"the next build left untagged images: {_describe(docker_client, left)}"
        layers = docker_client.images.get(REBUILD_TAG).attrs["RootFS"]["Layers"]
        kit_layers = fltest_image.attrs["RootFS"]["Layers"]
        changed = [i for i, (a, b) in enumerate(zip(layers, kit_layers)) if a != b]
        # COPY fltest/ and the COPY after it (deploy/: the same files, a new layer once a step before it ran)
        assert len(layers) == len(kit_layers) and changed == [len(layers) - 2, len(layers) - 1], changed
        rebuilt = docker_client.images.get(REBUILD_TAG)
        assert find_in_stream(rebuilt.save(named=True), markers) == []
    finally:
        for container in docker_client.containers.list(all=True, filters={"name": REBUILD_USER}):
            container.remove(force=True)
        remove_build(docker_client, REBUILD_TAG)


def test_the_images_page_s_offline_build_makes_fltest_deploy_build_s_image(
    docker_client, fltest_image, tier_report, tmp_path
):
    """images.md's three commands as written, from a copy of the checkout whose wheelhouse lacks one wheel: the base
    image is there (nothing to do), fill-wheelhouse.sh fetches the missing wheel alone and says so in its last line,
    and the plain ``docker build`` makes the image fltest-deploy build made (every layer from its cache: the tag does
    not move)."""
    if shutil.which("sudo") is None:
        pytest.skip("the page's first command uses sudo, which is not installed here (.ci/run installs it)")
    checkout = user_checkout(tmp_path / "fltest")
    wheels = sorted((REPO / "wheelhouse").glob("*.whl"), key=lambda wheel: wheel.stat().st_size)
    missing = wheels[0]  # the smallest
    shutil.copytree(
        REPO / "wheelhouse", checkout / "wheelhouse", copy_function=link_or_copy, ignore=lambda _, __: [missing.name]
    )
    untagged = dangling_image_ids(docker_client)
    start = time.monotonic()
    try:
        result = run_block(doc_block("images/offline"), cwd=checkout, timeout=1800)
        tier_report(f"images.md: images/offline: exit {result.returncode} ({time.monotonic() - start:.0f} s)")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert f"image {KIT.base_image} already exists; nothing to do" in result.stderr, result.stderr[-3000:]
        (filled,) = [line for line in result.stdout.splitlines() if line.startswith("wheelhouse: ")]
        assert re.fullmatch(
            rf"wheelhouse: {checkout}/wheelhouse \(CPython {KIT.image_python}, {len(wheels)} wheels, \S+;"
            r" missing wheels fetched from PyPI\)",
            filled,
        ), filled  # the one missing fetched, nothing more
        assert (checkout / "wheelhouse" / missing.name).read_bytes() == missing.read_bytes()
        assert docker_client.images.get(IMAGE).id == fltest_image.id, result.stdout[-3000:]
    finally:
        if docker_client.images.get(IMAGE).id != fltest_image.id:  # the tag moved: back to the tier's image
            built = docker_client.images.get(IMAGE)
            fltest_image.tag(IMAGE)
            docker_client.images.remove(built.id, force=True)
        for left in dangling_image_ids(docker_client) - untagged:  # a failed step's image, and its container
            for container in docker_client.containers.list(all=True, filters={"ancestor": left}):
                container.remove(force=True)
            docker_client.images.remove(left, force=True)


def test_force_rebuilds_the_base_image_that_is_otherwise_built_only_when_missing(
    docker_client, fltest_image, tier_report
):
    """upgrading.md: the base image is built only when missing; ``FORCE=1 images/base/build-base-image.sh`` rebuilds
    it (a tag of the test's own, holding the kit's base image at first: the kit's tag stays where it is)."""
    if os.geteuid() != 0:
        pytest.skip("debootstrap needs root (CI runs as root)")
    kit_base = docker_client.images.get(KIT.base_image)
    kit_base.tag(*FORCE_TAG.split(":"))
    script = ["bash", "images/base/build-base-image.sh", FORCE_TAG]
    try:
        kept = subprocess.run(script, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert kept.returncode == 0 and "already exists; nothing to do" in kept.stderr, kept.stderr[-3000:]
        assert docker_client.images.get(FORCE_TAG).id == kit_base.id
        start = time.monotonic()
        forced = subprocess.run(
            script, cwd=REPO, env={**os.environ, "FORCE": "1"}, capture_output=True, text=True, timeout=900
        )
        tier_report(f"FORCE=1 build-base-image.sh: exit {forced.returncode} ({time.monotonic() - start:.0f} s)")
        assert forced.returncode == 0 and f"built {FORCE_TAG} in " in forced.stderr, forced.stderr[-3000:]
        assert docker_client.images.get(FORCE_TAG).id != kit_base.id  # a new image under the tag
        assert docker_client.images.get(KIT.base_image).id == kit_base.id  # the kit's, still held by its tag
    finally:
        docker_client.images.remove(FORCE_TAG, noprune=False)
