"""Ray's logical GPUs through the compose emulation (FLTEST_GPU_DEVICES=none: no GPU on these hosts): ``fltest-deploy
up --gpus-per-node 1`` starts every node with them, status counts them, a Flower client gets its share, a config asking
for more is refused; and the device requests compose itself renders when real GPUs are asked for."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from deploy.gpus import DEVICES_VARIABLE
from deploy.images import IMAGE
from deploy.kit import KIT_FILE, env_file_values
from deploy.pki.ray_token import ensure_ray_token
from deploy.ray_emulation.project import HEAD_SERVICE, WORKER_SERVICE, RayEmulation
from tests.conftest import base_config

pytestmark = pytest.mark.docker

PROJECT = "fltest-test-gpus"  # its own project: the other emulation tests' cluster is left alone
SETTINGS = {"FLTEST_IMAGE": IMAGE, "RAY_WORKERS": "1", "RAY_HEAD_CPUS": "1", "RAY_WORKER_CPUS": "1"}
GPU_HOOKS = """\
import ray


def after_local_training(partition_id, server_round, old_params, new_params):
    if not ray.is_initialized():  # the reference run, in the driver
        return {"gpus_seen": 0.0}
    return {"gpus_seen": float(len(ray.get_runtime_context().get_accelerator_ids().get("GPU", [])))}
"""


def _env(token, **settings) -> dict[str, str]:
    """fltest-deploy's environment for this project: the kit's values, the settings, Ray's logical GPUs."""
    return {
        **env_file_values(KIT_FILE),
        **os.environ,
        **SETTINGS,
        "COMPOSE_PROJECT_NAME": PROJECT,
        "RAY_TOKEN_FILE": str(token),
        DEVICES_VARIABLE: "none",
        **settings,
    }


def _fltest_deploy(env: dict[str, str], *args: str, cwd=None, timeout: float = 400) -> subprocess.CompletedProcess:
    """``fltest-deploy <args>`` as an operator types it."""
    return subprocess.run(
        [sys.executable, "-m", "deploy", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def logical_gpus(docker_client, fltest_image, tier_report, tmp_path_factory):
    """Head + 1 worker, 1 CPU and 1 logical GPU each, up by ``fltest-deploy up --gpus-per-node 1``; removed after."""
    token = tmp_path_factory.mktemp("secrets") / "ray_token"
    ensure_ray_token(token)
    env = _env(token)
    project = RayEmulation(name=PROJECT, overrides={**SETTINGS, "RAY_TOKEN_FILE": str(token)})
    project.down()  # a run killed earlier may have left it behind
    up = _fltest_deploy(env, "up", "--gpus-per-node", "1")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        tier_report(f"logical GPUs: {up.stdout.strip().splitlines()[-1]}")
        yield project, env, up
    finally:
        project.down()


def test_every_node_offers_ray_its_logical_gpu_and_status_counts_them(logical_gpus, docker_client):
    project, env, up = logical_gpus
    assert (
        up.stdout.strip().splitlines()[-1]
        == "ready: 2 nodes, 2 CPUs, 2 GPUs (Ray's logical GPUs: FLTEST_GPU_DEVICES=none)"
    )
    status = _fltest_deploy(env, "status", timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.strip().splitlines()[-1] == "ready: 2/2 nodes, 2/2 CPUs, 2/2 GPUs"
    containers = project.containers(docker_client)
    assert sorted(c.labels["com.docker.compose.service"] for c in containers) == [HEAD_SERVICE, WORKER_SERVICE]
    for container in containers:  # a node line: its GPU devices (none: logical) and Ray's GPUs
        assert re.search(rf"^{re.escape(container.name)} +running .* +- +1\.0$", status.stdout, re.MULTILINE), (
            status.stdout
        )
        host = container.attrs["HostConfig"]
        assert not host.get("DeviceRequests"), host.get("DeviceRequests")  # logical: nothing asked of Docker
        assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True  # the hardening stays
        assert "--num-gpus=1" in container.attrs["Config"]["Cmd"]


def test_a_flower_client_on_the_emulation_gets_its_gpu_share(logical_gpus, tmp_path):
    _, env, _ = logical_gpus
    (tmp_path / "gpu_hooks.py").write_text(GPU_HOOKS)
    config = base_config()
    config.update(name="logical-gpus", clients=4, total_cpus=2, total_gpus=2, hooks="gpu_hooks")  # 1 GPU a client
    config["training"].update(rounds=2, local_epochs=1, round_timeout_s=60)
    config["runs"] = [{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr"}]
    (tmp_path / "experiment.yaml").write_text(yaml.safe_dump(config))
    run = _fltest_deploy(env, "run", "experiment.yaml", cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    flower = tmp_path / "results" / "logical-gpus" / "flower"
    rounds = [json.loads(line) for line in (flower / "metrics.jsonl").read_text().splitlines()][1:]
    assert [r["train"]["gpus_seen"] for r in rounds] == pytest.approx(
        [1.0, 1.0]
    )  # every client of every round had one GPU
    assert json.loads((flower / "summary.json").read_text())["client_gpus"] == 1.0


def test_a_config_asking_the_emulation_for_more_gpus_is_refused_before_staging(logical_gpus, tmp_path):
    _, env, _ = logical_gpus
    config = base_config()
    config.pop("hooks")  # the example's hooks module is not beside this config
    config.update(name="too-many-gpus", total_cpus=2, total_gpus=3)
    config["runs"] = [{"name": "flower", "framework": "flwr"}]
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    run = _fltest_deploy(env, "run", str(path), "--results-dir", str(tmp_path / "results"), timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip().splitlines() == [
        f"fltest-deploy: error: {path}: total_gpus: 3 GPUs asked, Ray cluster {PROJECT} has 2"
    ]
    assert not (tmp_path / "results").exists()


def test_compose_renders_a_device_request_per_node_container(tmp_path, monkeypatch, compose_tool):
    """docker-compose (1.29, or compose v2) reads the generated file: each node's NVIDIA request, its count an integer."""
    tool = compose_tool
    monkeypatch.delenv(DEVICES_VARIABLE, raising=False)
    for name in (".env", "docker-compose.yml"):
        (tmp_path / name).write_text((RayEmulation().directory / name).read_text())
    project = RayEmulation(
        directory=tmp_path,
        name="fltest-gpu-config",
        overrides={"RAY_TOKEN_FILE": str(tmp_path / "token"), "RAY_HEAD_GPUS": "1", "RAY_WORKER_GPUS": "2"},
    )
    services = yaml.safe_load(project.compose("config").stdout)["services"]
    for service, count in ((HEAD_SERVICE, 1), (WORKER_SERVICE, 2)):
        (device,) = services[service]["deploy"]["resources"]["reservations"]["devices"]
        assert (
            device["driver"] == "nvidia" and device["count"] == count and device["capabilities"] in (["gpu"], [["gpu"]])
        ), (tool, device)
        assert f"--num-gpus={count}" in services[service]["command"]
        assert services[service]["cap_drop"] == ["ALL"] and services[service]["read_only"] is True
