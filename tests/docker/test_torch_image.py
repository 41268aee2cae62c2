"""The image variant with PyTorch (``fltest-deploy build --extras torch``) and the CNN example on its Ray cluster.

The variant adds the ``torch`` extra to the image's venv in one layer below the code, its wheels
served on the host's loopback during that step only. Its cluster runs ``examples/digits_cnn_cluster.yaml``
as docs/how-to/images.md says, with clients on the head and both workers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from deploy.images import EXTRAS_WHEELHOUSE, IMAGE, build_tags, remove_build, variant_tag
from deploy.ray_emulation.project import RayEmulation
from tests.doc_blocks import doc_block, run_block, user_checkout
from tests.test_torch_model import TORCH_TOLERANCE

pytestmark = [pytest.mark.docker, pytest.mark.torch]

TORCH_IMAGE = variant_tag(IMAGE, ("torch",))
PROJECT = "fltest-torch-test"


@pytest.fixture(scope="module")
def torch_image(docker_client, fltest_image, tier_report):
    """``fltest-deploy build --extras torch`` as the README types it (after the default image: its stages are
    shared); every tag it made is removed after the module (the variant is about 6 GB)."""
    start = time.monotonic()
    build = subprocess.run(
        [sys.executable, "-m", "deploy", "build", "--extras", "torch"], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr[-3000:]
    assert re.fullmatch(rf"built {re.escape(TORCH_IMAGE)} \(\d+ MB\)", build.stdout.splitlines()[-1]), build.stdout
    stages = [
        line.removeprefix("[fltest-deploy build] ")
        for line in build.stderr.splitlines()
        if line.startswith("[fltest-deploy")
    ]
    tier_report(f"torch variant: built ({time.monotonic() - start:.1f} s): {'; '.join(stages)}")
    try:
        yield docker_client.images.get(TORCH_IMAGE)
    finally:
        remove_build(docker_client, TORCH_IMAGE)


def _python(client, image: str, code: str) -> str:
    """What ``python -c code`` prints in a throwaway container of ``image`` with no network."""
    return client.containers.run(image, ["python", "-c", code], remove=True, network_mode="none").decode().strip()


def test_torch_is_in_the_variant_below_the_code_and_in_no_default_image(docker_client, fltest_image, torch_image):
    find_torch = "import importlib.util as u; print(u.find_spec('torch') is not None)"
    assert _python(docker_client, TORCH_IMAGE, "import torch; print(torch.__version__)").startswith("2.15.0")
    assert _python(docker_client, IMAGE, find_torch) == "False"  # the default image stays without it
    steps = [layer["CreatedBy"] for layer in torch_image.history()]  # newest first
    extras_step = next(i for i, step in enumerate(steps) if "extras-requirements.txt" in step and "pip install" in step)
    code_step = next(i for i, step in enumerate(steps) if "COPY dir:" in step or "COPY file:" in step)
    assert code_step < extras_step  # the code above the extras: a code change keeps their layer
    served = {wheel.name for wheel in EXTRAS_WHEELHOUSE.glob("*.whl")}
    in_image = _python(
        docker_client, TORCH_IMAGE, "import pathlib; print(*(p.name for p in pathlib.Path('/').glob('**/*.whl')))"
    )
    assert len(served) > 20 and not served & set(
        in_image.split()
    )  # the extras' wheels were served to the build, never copied in
    assert build_tags(TORCH_IMAGE)[-1] == TORCH_IMAGE and torch_image.attrs["Config"]["User"] == "fltest"


def test_the_images_page_s_torch_block_runs_the_cnn_on_the_head_and_both_workers(
    docker_client, torch_image, tmp_path, tier_report
):
    """docs/how-to/images.md's block as written, from a copy of the checkout: the variant built (it is), its cluster
    up, ``examples/digits_cnn_cluster.yaml`` run there with results in ./results; Flower's clients trained on all
    three nodes and match the reference."""
    folder = user_checkout(tmp_path / "fltest")
    settings = {"COMPOSE_PROJECT_NAME": PROJECT, "RAY_TOKEN_FILE": str(folder / "compose" / "secrets" / "ray_token")}
    project = RayEmulation(name=PROJECT, overrides={"RAY_TOKEN_FILE": settings["RAY_TOKEN_FILE"]})
    project.down()  # a run killed earlier may have left it behind
    try:
        start = time.monotonic()
        block = run_block(doc_block("images/torch"), cwd=folder, env=settings, timeout=1500)
        tier_report(f"images.md: images/torch: exit {block.returncode} ({time.monotonic() - start:.1f} s)")
        assert block.returncode == 0, block.stdout[-3000:] + block.stderr[-3000:]
        assert {c.image.tags[0] for c in project.containers(docker_client)} == {TORCH_IMAGE}
        hostnames = {c.attrs["Config"]["Hostname"] for c in project.containers(docker_client)}
    finally:
        project.down()
    assert project.leftovers(docker_client) == []
    experiment = folder / "results" / "digits-cnn-cluster"
    summary = json.loads((experiment / "flower" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 5, summary
    assert set(summary["client_hosts"]) == hostnames  # clients trained on the head and both workers
    comparison = json.loads((experiment / "comparison.json").read_text())
    assert [row["status"] for row in comparison["runs"]] == ["completed", "completed"], comparison
    assert comparison["runs"][1]["max_param_diff_vs_reference"] <= TORCH_TOLERANCE, comparison
    final = json.loads((experiment / "flower" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "update_norm" in final["train"]  # the workers imported the example's hooks module too
