"""The host-side parts of deploy/ that need no Docker engine: node command lines, token, health, settings."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from deploy.compose import ComposeProject, compose_cli
from deploy.health import closed_ports
from deploy.ray_node import PORTS, WORKER_PORTS, start_args
from deploy.secrets import ensure_ray_token


def _flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def test_head_and_worker_listen_on_the_pinned_ports():
    head = start_args("head", 2, 100_000_000, None, None)
    worker = start_args("worker", 4, 100_000_000, "10.0.0.1:6379", "10.0.0.2")
    assert head[:3] == ["ray", "start", "--block"] and "--head" in head and "--head" not in worker
    assert _flag(head, "port") == str(PORTS["gcs"]) and _flag(worker, "address") == "10.0.0.1:6379"
    for args, cpus in ((head, "2"), (worker, "4")):
        assert _flag(args, "num-cpus") == cpus
        assert _flag(args, "node-manager-port") == str(PORTS["node_manager"])
        assert _flag(args, "object-manager-port") == str(PORTS["object_manager"])
        assert (_flag(args, "min-worker-port"), _flag(args, "max-worker-port")) == tuple(map(str, WORKER_PORTS))
    assert _flag(worker, "node-ip-address") == "10.0.0.2"
    assert not WORKER_PORTS[0] <= PORTS["client_server"] <= WORKER_PORTS[1]  # Ray Client outside the worker range


@pytest.mark.parametrize("env", [{}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/nonexistent"}], ids=["no-mode", "no-file"])
def test_a_node_refuses_to_start_without_token_authentication(env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    result = subprocess.run([sys.executable, "-m", "deploy.ray_node", "head", "--num-cpus", "1"],
                            env={**clean, **env}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode != 0
    assert "RAY_AUTH" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_token_is_created_once_and_kept_private(tmp_path):
    path = tmp_path / "secrets" / "ray_token"
    assert ensure_ray_token(path) is True
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read-only
    if os.geteuid() == 0:
        assert (path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) == (10001, 0o400)
    assert ensure_ray_token(path) is False and path.read_text() == token  # never overwritten


def test_the_health_check_names_the_closed_ports():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]  # bound, not listening: refuses connections
            assert closed_ports("127.0.0.1", [open_port, closed_port]) == [closed_port]


def test_the_settings_shape_the_cluster(tmp_path):
    try:
        compose_cli()
    except Exception as exc:
        pytest.skip(f"no compose tool: {exc}")
    project = ComposeProject(name="fltest-settings", overrides={"RAY_WORKERS": "3", "RAY_HEAD_CPUS": "2", "RAY_WORKER_CPUS": "4",
                                                                  "RAY_TOKEN_FILE": str(tmp_path / "token")})  # fmt: skip
    shape = project.shape()
    assert (shape.nodes, shape.head_cpus, shape.worker_cpus, shape.cpus) == (4, 2.0, 4.0, 14.0)


def test_a_bad_config_is_refused_on_the_host_before_any_container(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\nclients: 0\n")
    result = subprocess.run([sys.executable, "-m", "deploy", "run", str(config), "--results-dir", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"fltest-deploy: error: {config}: ")
    assert not (tmp_path / "out").exists()
