"""The FLTest image, built offline from the wheelhouse, run as a user would run it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.docker


def _run(client, image, command, **kwargs) -> str:
    output = client.containers.run(image.id, command, remove=True, network_mode="none", **kwargs)
    return output.decode().strip()


def test_image_runs_as_non_root_with_the_fixed_paths(docker_client, fltest_image):
    assert fltest_image.attrs["Config"]["User"] == "fltest"
    out = _run(docker_client, fltest_image, ["python", "-c", "import os, sys, fltest; print(os.getuid(), sys.prefix, fltest.__file__)"])
    uid, prefix, module = out.split()
    assert uid != "0"
    assert prefix == "/opt/fltest/.venv"
    assert module == "/opt/fltest/app/fltest/__init__.py"
    assert fltest_image.labels["org.opencontainers.image.version"] == "0.1.0"


def test_fltest_runs_the_example_inside_and_writes_results_on_the_host(docker_client, fltest_image, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the container's non-root user writes here
    _run(
        docker_client,
        fltest_image,
        ["fltest", "run", "/examples/digits.yaml", "--results-dir", "/results"],
        volumes={str(REPO / "examples"): {"bind": "/examples", "mode": "ro"}, str(results): {"bind": "/results", "mode": "rw"}},
    )
    summary = json.loads((results / "digits-demo" / "reference" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["final"]["accuracy"] > 0.85
    assert (results / "digits-demo" / "report.png").is_file()
