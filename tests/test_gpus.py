"""GPUs in the kit, without a GPU or a Docker engine: each node's Ray --num-gpus, the compose device requests the
emulation renders for them (none with FLTEST_GPU_DEVICES=none), the status counts, and validate's cluster rule."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from deploy.compose import COMPOSE_DIR
from deploy.flower_emulation.federation import GPU_SETTING, FlowerFederation
from deploy.gpus import DEVICES_VARIABLE, device_mode, gpu_count
from deploy.node.ray_start import start_args
from deploy.ray_emulation.project import (
    GPU_FILE,
    GPU_SETTINGS,
    HEAD_SERVICE,
    WORKER_SERVICE,
    ClusterShape,
    RayEmulation,
    command_gpus,
)
from deploy.ray_emulation.readiness import ClusterState
from fltest.config.schema import ExperimentConfig
from fltest.errors import FieldError, InputError
from fltest.model.devices import CLIENT_DEVICE_VARIABLE, GPU
from fltest.validate import check_cluster_gpus, gpus_asked
from tests.conftest import base_config


def _flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def test_a_node_offers_ray_the_gpus_it_is_given_and_none_by_default():
    assert _flag(start_args("head", 1, 100_000_000, None, None), "num-gpus") == "0"  # never Ray's autodetection
    assert _flag(start_args("worker", 2, 100_000_000, "10.0.0.1:6379", None, num_gpus=2), "num-gpus") == "2"


@pytest.fixture
def emulation_dir(tmp_path, monkeypatch):
    """A copy of compose/ (its settings and compose file), so that the generated GPU file lands in tmp_path."""
    for key in (DEVICES_VARIABLE, *GPU_SETTINGS.values()):
        monkeypatch.delenv(key, raising=False)
    for name in (".env", "docker-compose.yml"):
        shutil.copy(COMPOSE_DIR / name, tmp_path / name)
    return tmp_path


def test_each_node_container_gets_a_device_request_of_its_gpu_count(emulation_dir):
    project = RayEmulation(directory=emulation_dir, overrides={"RAY_HEAD_GPUS": "1", "RAY_WORKER_GPUS": "2"})
    files = project.compose_files()
    assert files[-1] == emulation_dir / GPU_FILE
    written = yaml.safe_load(files[-1].read_text())
    devices = {
        name: service["deploy"]["resources"]["reservations"]["devices"] for name, service in written["services"].items()
    }
    assert devices == {
        HEAD_SERVICE: [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}],
        WORKER_SERVICE: [{"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}],
    }
    assert all(isinstance(d[0]["count"], int) for d in devices.values())  # docker-compose 1.29 refuses a string count
    compose = yaml.safe_load((emulation_dir / "docker-compose.yml").read_text())["services"]
    assert "--num-gpus=${RAY_HEAD_GPUS}" in compose[HEAD_SERVICE]["command"]  # Ray's count is the same setting
    assert "--num-gpus=${RAY_WORKER_GPUS}" in compose[WORKER_SERVICE]["command"]


def test_only_nodes_with_gpus_get_a_request_and_logical_gpus_get_none(emulation_dir, monkeypatch):
    head_only = RayEmulation(directory=emulation_dir, overrides={"RAY_HEAD_GPUS": "1"})
    assert list(head_only.gpu_override()["services"]) == [HEAD_SERVICE]
    assert RayEmulation(directory=emulation_dir).compose_files() == [
        emulation_dir / "docker-compose.yml"
    ]  # the settings: 0 GPUs
    monkeypatch.setenv(DEVICES_VARIABLE, "none")
    logical = RayEmulation(directory=emulation_dir, overrides={"RAY_HEAD_GPUS": "1", "RAY_WORKER_GPUS": "1"})
    assert logical.gpu_override() is None and logical.compose_files() == [emulation_dir / "docker-compose.yml"]


def test_bad_gpu_settings_are_one_line_naming_the_setting():
    with pytest.raises(InputError, match=r"^FLTEST_GPU_DEVICES=cuda: expected none \(Ray's logical GPUs only"):
        device_mode("cuda")
    with pytest.raises(InputError, match=r"^RAY_WORKER_GPUS=two: expected a GPU count \(0 or more\)$"):
        gpu_count("two", "RAY_WORKER_GPUS")
    assert (device_mode(None), device_mode("none"), gpu_count("", "X")) == ("nvidia", "none", 0)


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            ["up", "--gpus-per-node", "-1"],
            {},
            "fltest-deploy: error: --gpus-per-node -1: expected a GPU count (0 or more)",
        ),
        (
            ["up", "--gpus-per-node", "1"],
            {DEVICES_VARIABLE: "all"},
            "fltest-deploy: error: FLTEST_GPU_DEVICES=all: expected none",
        ),
    ],
    ids=["negative-count", "unknown-device-mode"],
)
def test_fltest_deploy_up_refuses_bad_gpu_settings_before_the_engine_is_asked(tmp_path, args, env, line):
    for name in (".env", "docker-compose.yml"):
        shutil.copy(COMPOSE_DIR / name, tmp_path / name)
    result = subprocess.run(
        [sys.executable, "-m", "deploy", "--compose-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        env={**_clean_env(), **env, "DOCKER_HOST": "unix:///nonexistent.sock"},
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith(line), error


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (DEVICES_VARIABLE, *GPU_SETTINGS.values())}


def test_a_node_s_gpus_are_read_back_from_its_command():
    assert command_gpus(["python", "-m", "deploy.node.ray_start", "head", "--num-cpus=1", "--num-gpus=2"]) == 2.0
    assert command_gpus("python -m deploy.node.ray_start worker --num-cpus=1") == 0.0  # a node from before GPUs: none
    assert command_gpus(None) == 0.0


def test_status_lines_name_gpus_only_where_the_cluster_has_or_expects_any():
    cpu_only = ClusterShape(head_cpus=1, workers=2, worker_cpus=1)
    state = ClusterState(shape=cpu_only, nodes={"h": 1.0, "w1": 1.0, "w2": 1.0}, missing=[], cpus=3.0)
    assert (state.summary(), state.summary(of_shape=True), state.ready) == (
        "3 nodes, 3 CPUs",
        "3/3 nodes, 3/3 CPUs",
        True,
    )
    with_gpus = ClusterShape(head_cpus=1, workers=2, worker_cpus=1, head_gpus=1, worker_gpu_total=2)
    partial = ClusterState(
        shape=with_gpus,
        nodes={"h": 1.0, "w1": 1.0, "w2": 1.0},
        missing=[],
        cpus=3.0,
        node_gpus={"h": 1.0, "w1": 1.0, "w2": 0.0},
        gpus=2.0,
    )
    assert (
        partial.summary(of_shape=True) == "3/3 nodes, 3/3 CPUs, 2/3 GPUs" and not partial.ready
    )  # a node lacks its GPU


def _config(total_gpus: float, total_cpus: int, frameworks: list[dict]) -> ExperimentConfig:
    data = base_config()
    data.update(total_gpus=total_gpus, total_cpus=total_cpus, runs=frameworks)
    return ExperimentConfig.model_validate(data)


FLOWER = {"name": "flower", "framework": "flwr"}
REFERENCE = {"name": "reference", "framework": "reference"}
DEPLOYMENT = {
    "name": "sn",
    "framework": "flwr",
    "options": {"mode": "deployment", "superlink": "127.0.0.1:9443", "root_certificates": "ca.crt"},
}


def test_only_flower_simulation_runs_ask_a_ray_cluster_for_gpus():
    assert gpus_asked(_config(2, 2, [REFERENCE, FLOWER])) == 2
    assert gpus_asked(_config(2, 2, [REFERENCE, DEPLOYMENT])) == 0  # SuperNodes train where their GPUs are
    check_cluster_gpus(_config(4, 2, [REFERENCE]), [0.0], "cluster X")  # the reference asks Ray for nothing


@pytest.mark.parametrize(
    ("total_gpus", "total_cpus", "nodes", "message"),
    [
        (3, 4, [1.0, 1.0], "total_gpus: 3 GPUs asked, cluster X has 2"),
        (1, 1, [0.0, 0.0], "total_gpus: 1 GPU asked, cluster X has 0"),
        (
            2,
            1,
            [1.0, 1.0],
            "total_gpus: each client asks total_gpus/total_cpus = 2 GPUs, no node of cluster X has that many (the most: 1)",
        ),
    ],
    ids=["more-than-the-cluster", "no-gpu-at-all", "a-share-no-node-holds"],
)
def test_a_config_asking_a_cluster_for_more_gpus_than_it_has_is_refused(total_gpus, total_cpus, nodes, message):
    with pytest.raises(FieldError) as refused:
        check_cluster_gpus(_config(total_gpus, total_cpus, [REFERENCE, FLOWER]), nodes, "cluster X")
    assert str(refused.value) == message
    check_cluster_gpus(_config(2, 2, [REFERENCE, FLOWER]), [1.0, 1.0], "cluster X")  # as many as it has: accepted


@pytest.fixture
def flower_dir(tmp_path, monkeypatch):
    """A copy of the Flower emulation's settings and compose file."""
    for key in (DEVICES_VARIABLE, GPU_SETTING):
        monkeypatch.delenv(key, raising=False)
    for name in ("flower.env", "flower.yml"):
        shutil.copy(COMPOSE_DIR / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize(
    ("settings", "devices", "told"),
    [
        ({}, None, False),
        ({GPU_SETTING: "1"}, [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}], True),
        ({GPU_SETTING: "1", DEVICES_VARIABLE: "none"}, None, True),
    ],
    ids=["no-gpu", "one-gpu", "logical"],
)
def test_a_supernode_given_a_gpu_has_its_device_request_and_tells_its_client_apps(flower_dir, settings, devices, told):
    federation = FlowerFederation(directory=flower_dir, generated_dir=flower_dir / ".generated", overrides=settings)
    service = federation.supernode_service("supernode-0", 0, 2)
    assert service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices") == devices
    assert (service["environment"].get(CLIENT_DEVICE_VARIABLE) == GPU) is told
    hardening = federation.hardening()
    for key in ("cap_drop", "security_opt", "read_only", "tmpfs", "pids_limit", "user"):  # a GPU keeps the hardening
        assert service[key] == hardening[key], key
    assert hardening["environment"].items() <= service["environment"].items()  # FLWR_HOME, HOME, HF_HOME kept


@pytest.mark.torch
@pytest.mark.parametrize(
    ("told", "cuda", "expected"),
    [(True, True, "cuda"), (True, False, "cpu"), (False, True, "cpu")],
    ids=["told-with-cuda", "told-without-cuda", "not-told"],
)
def test_a_supernode_s_client_app_trains_on_the_gpu_it_was_given(monkeypatch, told, cuda, expected):
    """Outside Ray (a SuperNode's ClientApp process): the kit's variable and a GPU PyTorch sees make it ``cuda``.
    No GPU here: PyTorch's answer whether it sees one is what the test sets."""
    torch = pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    from fltest.model.torch_classifier import training_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    if told:
        monkeypatch.setenv(CLIENT_DEVICE_VARIABLE, GPU)
    else:
        monkeypatch.delenv(CLIENT_DEVICE_VARIABLE, raising=False)
    assert training_device().type == expected
