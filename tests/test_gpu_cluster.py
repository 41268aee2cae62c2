"""Ray's logical GPUs on a 2-node cluster on this machine (``FLTEST_RAY_ADDRESS``): each Flower client gets its
share, and a config asking the cluster for more GPUs than it has is refused in one line before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fltest.config import load_config
from fltest.runner import run_experiment
from tests.conformance import assert_conforms
from tests.conftest import base_config
from tests.ray_cluster import head_and_node

pytestmark = pytest.mark.ray

GPU_HOOKS = """\
import json, os
import ray


def before_local_training(partition_id, server_round, x, y):
    if not ray.is_initialized():  # the reference run, in the driver
        return None
    gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
    with open({log!r}, "a") as handle:
        handle.write(json.dumps({{"client": partition_id, "gpus": gpus, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}}) + "\\n")
"""


@pytest.fixture
def gpu_cluster(monkeypatch):
    """A Ray head and one more node with one logical GPU each (Ray's ``num_gpus``; this machine has no GPU)."""
    with head_and_node(monkeypatch, node_args={"num_gpus": 1}, num_gpus=1) as (cluster, _):
        yield cluster


def _config_file(folder: Path, total_gpus: float, total_cpus: int, hooks: str | None = None) -> Path:
    config = base_config()
    config.update(name="gpu-share", clients=4, total_cpus=total_cpus, total_gpus=total_gpus, hooks=hooks)
    config["training"].update(rounds=2, round_timeout_s=60)
    config["output"] = {"save_round_models": True}
    config["runs"] = [{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr"}]
    path = folder / f"gpus-{total_gpus:g}-of-{total_cpus}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_each_flower_client_on_the_cluster_gets_its_gpu_share(tmp_path, monkeypatch, gpu_cluster):
    log = tmp_path / "clients.jsonl"
    (tmp_path / "gpu_hooks.py").write_text(GPU_HOOKS.format(log=str(log)))
    monkeypatch.syspath_prepend(str(tmp_path))  # reaches the workers through the driver's sys.path
    config = load_config(_config_file(tmp_path, total_gpus=2, total_cpus=2, hooks="gpu_hooks"))  # 1 GPU a client

    comparison = run_experiment(config, tmp_path)

    assert [r["status"] for r in comparison["runs"]] == ["completed", "completed"], comparison
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) == 4 * 2  # every client, every round
    for client in seen:  # Ray gave each client one whole (logical) GPU and told CUDA which
        assert len(client["gpus"]) == 1 and client["visible"] == client["gpus"][0], client
    assert {gpu for client in seen for gpu in client["gpus"]} == {"0"}  # each node's only GPU
    summary = json.loads((tmp_path / "gpu-share" / "flower" / "summary.json").read_text())
    assert summary["client_gpus"] == 1.0
    assert_conforms(tmp_path / "gpu-share", "flower", 2)


@pytest.mark.parametrize(
    ("total_gpus", "total_cpus", "refusal"),
    [
        (3, 2, "total_gpus: 3 GPUs asked, the Ray cluster at {address} has 2"),
        (
            2,
            1,
            "total_gpus: each client asks total_gpus/total_cpus = 2 GPUs, no node of the Ray cluster at {address} has that many (the most: 1)",
        ),
    ],
    ids=["more-than-the-cluster", "a-share-no-node-holds"],
)
def test_a_config_asking_more_gpus_than_the_cluster_has_is_refused_in_one_line(
    tmp_path, gpu_cluster, total_gpus, total_cpus, refusal
):
    path = _config_file(tmp_path, total_gpus=total_gpus, total_cpus=total_cpus)
    expected = f"fltest: error: {path}: " + refusal.format(address=gpu_cluster.address)
    for command in (["validate", str(path)], ["run", str(path), "--results-dir", str(tmp_path / "results")]):
        result = subprocess.run(
            [sys.executable, "-m", "fltest.cli", *command], capture_output=True, text=True, timeout=300
        )
        assert (result.returncode, result.stderr.strip().splitlines()) == (2, [expected]), (
            command,
            result.stderr[-3000:],
        )
    assert not (tmp_path / "results").exists()  # refused before anything was written
