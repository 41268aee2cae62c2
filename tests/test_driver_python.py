"""A driver whose Python is not the Ray cluster's is refused before Ray's own error (``FLTEST_RAY_ADDRESS``).

Ray stores the Python it was started with in its GCS and compares a joining driver's with it. The
cluster here is a real Ray head on this machine whose stored version is that of another Python (the
kit's images run Debian 13's 3.13, a host may run 3.11): what Ray itself would compare.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess

import pytest
import yaml

from tests.conftest import REPO, base_config
from tests.user_folder import FLTEST

pytestmark = pytest.mark.ray


def _other_python() -> str:
    """A Python two minors away from this one's (3.11.7 -> 3.13.7)."""
    major, minor, patch = platform.python_version_tuple()
    return f"{major}.{int(minor) + 2}.{patch}"


@pytest.fixture
def cluster_of_another_python():
    """A real Ray head whose GCS says it runs :func:`_other_python`; yields ``(address, that version)``."""
    from ray._common.usage import usage_constants
    from ray._private import ray_constants
    from ray._raylet import GcsClient
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        gcs = GcsClient(address=cluster.address)
        key, namespace = usage_constants.CLUSTER_METADATA_KEY, ray_constants.KV_NAMESPACE_CLUSTER
        metadata = json.loads(gcs.internal_kv_get(key, namespace=namespace))
        metadata["python_version"] = _other_python()
        gcs.internal_kv_put(key, json.dumps(metadata).encode(), True, namespace=namespace)
        yield cluster.address, metadata["python_version"]
    finally:
        cluster.shutdown()


def test_a_driver_of_another_python_is_refused_in_one_line_naming_both(tmp_path, cluster_of_another_python):
    address, cluster_python = cluster_of_another_python
    config = base_config()
    config["runs"] = [{"name": "flower", "framework": "flwr"}]
    config.pop("output", None)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "digits_hooks.py").write_text((REPO / "examples" / "digits_hooks.py").read_text())
    env = {**os.environ, "FLTEST_RAY_ADDRESS": address, "HF_HOME": "hf-home", "HF_HUB_OFFLINE": "1"}
    expected = (
        f"fltest: error: FLTEST_RAY_ADDRESS={address}: the Ray cluster runs Python {cluster_python}, this driver Python "
        f"{platform.python_version()}: Ray needs the same Python (to the patch level) on the driver; run fltest with "
        f"Python {cluster_python} or in the head (fltest-deploy run)"
    )
    for command in ("validate", "run"):
        done = subprocess.run(
            [FLTEST, command, "exp.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert (done.returncode, done.stderr.strip().splitlines()) == (2, [expected]), done.stderr
    assert not (tmp_path / "results").exists()  # refused before anything was written
