"""The compose emulation against the real engine: a Ray head and 2 workers, fltest run in the head."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
import yaml

from deploy.compose import COMPOSE_DIR, SERVICE_LABEL, compose_cli, dotenv_value
from deploy.images import IMAGE
from deploy.kit import KIT_FILE, env_file_values
from deploy.pki.ray_token import ensure_ray_token
from deploy.ray_emulation.project import HEAD_SERVICE, WORKER_SERVICE, RayEmulation
from deploy.ray_emulation.readiness import live_ray_nodes, wait_until_ready
from deploy.ray_emulation.run_in_head import run_in_head, runs_in
from fltest.backends.supervision.deadlines import REPLY_GRACE_S
from fltest.config import load_config
from fltest.results.cluster_hint import cluster_hint
from tests.conformance import TOLERANCE, max_difference
from tests.conftest import REPO, base_config
from tests.docker.hardening import assert_hardened

pytestmark = pytest.mark.docker

PROJECT = "fltest-test"  # not the default project: a user's own emulation is left alone
READY_TIMEOUT_S = 240
ROUND_WAIT_S = (
    480  # until a run reaches round 2 (about 40 s here; over 180 s once, the Ansible tier's image loads beside it)
)
SETTINGS = {"FLTEST_IMAGE": IMAGE, "RAY_WORKERS": "2", "RAY_HEAD_CPUS": "1", "RAY_WORKER_CPUS": "1"}


def _env(project: str, token, **settings) -> dict[str, str]:
    """The environment of a plain compose or fltest-deploy call on ``project`` with ``token``, the kit's values
    in it as the README's plain compose line sources them (``set -a; . ../deploy/kit.env``)."""
    return {
        **env_file_values(KIT_FILE),
        **os.environ,
        **SETTINGS,
        "COMPOSE_PROJECT_NAME": project,
        "RAY_TOKEN_FILE": str(token),
        **settings,
    }


def _fltest_deploy(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``fltest-deploy <args>`` as an operator types it, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "deploy", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _plain_compose(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``docker-compose <args>`` (or ``docker compose``) run in compose/, as the README allows."""
    return subprocess.run(
        [*compose_cli(), *args], cwd=COMPOSE_DIR, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def emulation(docker_client, fltest_image, tier_report, tmp_path_factory):
    """Head + 2 workers, 1 CPU each, with a fresh token; removed (containers, network, volume) after."""
    token = tmp_path_factory.mktemp("secrets") / "ray_token"
    ensure_ray_token(token)
    project = RayEmulation(name=PROJECT, overrides={**SETTINGS, "RAY_TOKEN_FILE": str(token)})
    project.down()  # a run killed earlier may have left it behind
    start = time.monotonic()
    project.up(docker_client)
    try:
        wait_until_ready(project, docker_client, READY_TIMEOUT_S)
        tier_report(f"emulation: head + 2 workers ready ({time.monotonic() - start:.1f} s)")
        yield project
    finally:
        start = time.monotonic()
        project.down()
        tier_report(f"emulation: removed ({time.monotonic() - start:.1f} s)")


# A client that trains this long keeps its Ray actor busy: Flower hands a message to the idle actor it returned to
# its pool last, so with quick clients one actor can serve a whole round while another is never asked.
BUSY_HOOK = (
    "\n\ndef before_local_training(partition_id, server_round, x, y):\n"
    "    import time\n\n    import ray\n\n"
    "    if ray.is_initialized():  # a Ray worker (the reference runs in the driver, before it joins)\n"
    "        time.sleep({busy_s})\n"
)


def _experiment(folder, name, rounds, clients=6, timeout_s=60, busy_s=0.0):
    """A config folder with a reference and a flwr run, and a hooks module the workers must import; with ``busy_s``,
    each Flower client trains that much longer, so that every actor of the cluster serves each round."""
    folder.mkdir()
    hooks = (REPO / "examples" / "digits_hooks.py").read_text()
    (folder / "digits_hooks.py").write_text(hooks + (BUSY_HOOK.format(busy_s=busy_s) if busy_s else ""))
    config = base_config()
    config.update(name=name, clients=clients, total_cpus=2)
    config["training"].update(rounds=rounds, local_epochs=1, round_timeout_s=timeout_s)
    config["output"] = {"save_round_models": True}
    config["runs"] = [{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr"}]
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_ray_reports_every_node_with_its_pinned_cpus(emulation, docker_client):
    state = wait_until_ready(emulation, docker_client, 30)
    assert len(state.nodes) == 3 and state.cpus == 3.0
    containers = emulation.containers(docker_client)
    assert sorted(c.labels["com.docker.compose.service"] for c in containers) == [
        HEAD_SERVICE,
        WORKER_SERVICE,
        WORKER_SERVICE,
    ]
    for container in containers:
        host = container.attrs["HostConfig"]
        assert host["NanoCpus"] == state.nodes[container.name] * 1e9  # cgroup quota == Ray's --num-cpus
        assert host["ShmSize"] > 209715200  # /dev/shm above the object store
        assert not host["PortBindings"] and not any(container.ports.values())  # nothing published
        assert container.attrs["Config"]["User"] == "10001:10001"
        token_mount = next(m for m in container.attrs["Mounts"] if m["Destination"] == "/run/secrets/ray_token")
        assert token_mount["RW"] is False
        assert container.exec_run(["id", "-u"]).output.decode().strip() == "10001"
    network = docker_client.networks.get(f"{PROJECT}_cluster")
    assert network.attrs["Internal"] is True


def _limit(key: str) -> str:
    """A hardening limit as compose/.env sets it (the file every tool reads)."""
    return dotenv_value(COMPOSE_DIR / ".env", key)


def _bytes(size: str) -> int:
    """``3g``, ``512m`` or a byte count, in bytes (compose's mem_limit units)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    return int(size[:-1]) * units[size[-1].lower()] if size[-1].isalpha() else int(size)


def test_every_node_is_hardened_and_its_ray_logs_are_readable(emulation, docker_client):
    containers = emulation.containers(docker_client, include_stopped=True)
    assert len(containers) == 3
    services = yaml.safe_load(emulation.compose("config").stdout)["services"]  # the compose file, as resolved
    for container in containers:
        assert_hardened(container)
        host = container.attrs["HostConfig"]
        assert host["Memory"] == _bytes(_limit("RAY_MEMORY_LIMIT"))
        assert host["PidsLimit"] == int(services[container.labels["com.docker.compose.service"]]["pids_limit"])
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    logs = _fltest_deploy(env, "logs", "ray-head", "--lines", "3", timeout=120)
    assert logs.returncode == 0, logs.stderr
    assert re.search(
        r"== fltest-test.ray-head.1: Ray logs in /tmp/ray/session_latest/logs: .*raylet\.out", logs.stdout
    ), logs.stdout


DASHBOARD_PROBE = "import socket; socket.create_connection(('ray-head', 8265), timeout=5); print('OPEN')"


def test_by_default_nothing_listens_on_the_dashboard_port(emulation, docker_client):
    """No dashboard unless asked: from a worker, the head's 8265 is closed (and nothing is published: see above)."""
    worker = emulation.containers(docker_client, WORKER_SERVICE)[0]
    probe = worker.exec_run(["python", "-c", DASHBOARD_PROBE])
    assert probe.exit_code != 0 and b"ConnectionRefusedError" in probe.output, probe.output.decode()


DRIVER_PROBE = "import ray; ray.init(address='ray-head:6379'); print('JOINED', len(ray.nodes()))"


@pytest.mark.parametrize(
    "token_env",
    [None, {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": "/nonexistent"}, {"RAY_AUTH_TOKEN": "0" * 64}],
    ids=["own-token", "no-token", "wrong-token"],
)
def test_a_driver_without_the_token_is_refused(emulation, docker_client, token_env):
    """A driver in the head (beside a raylet, as drivers must be) joins with the token, and only with it."""
    head = emulation.head(docker_client)
    # A guard against a hang, not a timing promise: Python and Ray start up in it, slowly on a loaded 2-core machine.
    result = head.exec_run(["timeout", "120", "python", "-c", DRIVER_PROBE], environment=token_env, demux=True)
    # stdout alone holds the probe's line: Ray's log on stderr once came between "JOINED" and " 3" (CI, 2026-12-07)
    stdout, stderr = (part.decode() if part else "" for part in result.output)
    output = stdout + stderr
    joined = re.findall(r"^JOINED (\d+)$", stdout, re.M)  # the probe's line (Python 3.13's traceback quotes its code)
    if token_env is None:
        assert result.exit_code == 0 and joined == ["3"]
    else:
        assert result.exit_code != 0 and joined == []
        assert "InvalidAuthToken" in output


def test_a_node_without_the_token_is_refused(emulation, docker_client):
    container = docker_client.containers.run(
        IMAGE,
        ["timeout", "30", "ray", "start", "--address=ray-head:6379", "--num-cpus=1", "--block"],
        network=f"{PROJECT}_cluster",
        detach=True,
    )
    try:
        exit_code = container.wait(timeout=60)["StatusCode"]
        output = container.logs().decode()
    finally:
        container.remove(force=True)
    assert exit_code != 0
    assert "InvalidAuthToken" in output
    assert len(wait_until_ready(emulation, docker_client, 30).nodes) == 3  # and it did not join


def test_fltest_deploy_run_passes_fltest_s_exit_code_through(emulation, tmp_path):
    """From a working folder holding the config, as the README says: a run that fails exits 1, its results on the host."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "failing_hooks.py").write_text(
        "def after_local_training(partition_id, server_round, old_params, new_params):\n    raise RuntimeError('planted failure')\n"
    )
    config = base_config()
    config.update(name="deploy-run-fails", clients=2, total_cpus=2, hooks="failing_hooks")
    config["training"].update(rounds=1, local_epochs=1)
    (work / "experiment.yaml").write_text(yaml.safe_dump(config))
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    result = subprocess.run(
        [str(Path(sys.executable).with_name("fltest-deploy")), "run", "experiment.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    summary = json.loads((work / "results" / "deploy-run-fails" / "reference" / "summary.json").read_text())
    assert summary["status"] == "failed" and "planted failure" in summary["error"], summary


def _cifar_shaped_source(folder: Path, rows: int) -> None:
    """The benchmarks' CIFAR-10-shaped set (bench/data_scale.py: ``rows`` random 32x32x3 uint8 images), in ``folder``."""
    spec = importlib.util.spec_from_file_location("data_scale", REPO / "bench" / "data_scale.py")
    data_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(data_scale)
    data_scale.make_source(folder, rows)


def test_a_cifar_sized_set_runs_on_the_cluster_from_a_working_folder(emulation, tmp_path, tier_report):
    """60,000 CIFAR-shaped images (184 MB of pixels) beside the config, through fltest-deploy run: the head prepares its
    shards in the work volume (its home, where they went before, is a 64 MB tmpfs: no space left on the device) and
    the Flower run's model is the reference's."""
    work = tmp_path / "work"
    _cifar_shaped_source(work / "cifar", 60_000)
    config = base_config()
    config.update(
        name="deploy-run-cifar",
        clients=4,
        dataset={
            "source": "disk",
            "path": "cifar",
            "features": ["img"],
            "label": "label",
            "scale": 255.0,
            "test_fraction": 0.2,
        },
        hooks=None,
        output={"save_round_models": True},
    )
    config["runs"].append({"name": "flower", "framework": "flwr"})
    config["training"].update(rounds=2, local_epochs=1, learning_rate=0.05)
    (work / "experiment.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("fltest-deploy")), "run", "experiment.yaml"],
        cwd=work,
        env=_env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    experiment = work / "results" / "deploy-run-cifar"
    assert json.loads((experiment / "flower" / "summary.json").read_text())["train_samples"] == 48_000
    assert max_difference(experiment, "flower", 2) <= TOLERANCE
    # fltest run ends with the cluster hint exactly when the kit's round model says one node is clearly faster
    hint = cluster_hint(experiment / "flower", load_config(work / "experiment.yaml"))
    tier_report(f"cifar-sized run on 3 nodes: {hint or 'no hint (the cluster is not clearly slower)'}")
    output = result.stdout + result.stderr  # the head's output comes through on stderr
    assert (hint in output) if hint else ("one node would likely be faster" not in output), output[-3000:]


def test_status_and_wait_check_the_workers_that_run_not_the_settings(emulation, docker_client):
    """``up --workers 4`` with RAY_WORKERS=2 in the settings: status and wait expect the 5 nodes that run."""
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    up = _fltest_deploy(env, "up", "--workers", "4")
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip().splitlines()[-1] == "ready: 5 nodes, 5 CPUs"
    scaled_up = emulation.ray_temp_volumes(docker_client)
    assert len(scaled_up) == 5
    try:
        status = _fltest_deploy(env, "status", timeout=120)
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.strip().splitlines()[-1] == "ready: 5/5 nodes, 5/5 CPUs"
        wait = _fltest_deploy(env, "wait", "--timeout", "60", timeout=120)
        assert (wait.returncode, wait.stdout.strip()) == (0, "ready: 5 nodes, 5 CPUs"), wait.stderr
    finally:
        emulation.up(docker_client)  # back to the settings' 2 workers
    assert len(wait_until_ready(emulation, docker_client, READY_TIMEOUT_S).nodes) == 3
    kept = emulation.ray_temp_volumes(docker_client)
    assert len(kept) == 3 and kept < scaled_up
    left = {volume.name for volume in docker_client.volumes.list()} & (scaled_up - kept)
    assert not left, f"the removed workers' /tmp/ray volumes were left behind: {left}"


def test_status_exits_1_for_a_stopped_worker_and_up_s_timeout_line_names_it(emulation, docker_client):
    """A stopped worker: ``status`` says not ready (exit 1); ``up`` starts it, and a timeout too short
    for it to join ends in one error line naming that container; ``wait`` then sees the cluster whole."""
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    victim = emulation.containers(docker_client, WORKER_SERVICE)[0]
    victim.stop(timeout=10)
    deadline = time.monotonic() + 120
    while True:  # Ray drops a stopped node within seconds; a node it still lists would make status exit 0
        status = _fltest_deploy(env, "status", timeout=120)
        if status.returncode != 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout.strip().splitlines()[-1] == "not ready: 2/3 nodes, 2/3 CPUs", status.stdout
    assert re.search(rf"^{re.escape(victim.name)} +exited ", status.stdout, re.MULTILINE), status.stdout
    up = _fltest_deploy(env, "up", "--timeout", "1")  # ray start in a container takes longer than a second
    *progress, line = up.stderr.strip().splitlines()
    assert up.returncode == 1, up.stdout + up.stderr
    assert all(p.startswith("[wait] Ray reports ") for p in progress), up.stderr  # compose's own output is captured
    assert line.startswith(f"fltest-deploy: error: Ray cluster {PROJECT} not ready after 1s ("), line
    assert f"missing {victim.name} (running, not in Ray)" in line, line
    wait = _fltest_deploy(env, "wait", "--timeout", str(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 60)
    assert (wait.returncode, wait.stdout.strip()) == (0, "ready: 3 nodes, 3 CPUs"), wait.stderr


def test_plain_compose_up_without_a_token_stops_at_once_and_makes_no_directory(docker_client, fltest_image, tmp_path):
    token = tmp_path / "secrets" / "ray_token"  # never created
    env = _env("fltest-test-notoken", token)
    try:
        start = time.monotonic()
        result = _plain_compose(env, "up", "-d")
        elapsed = time.monotonic() - start
        assert result.returncode != 0
        reason = f'Cannot create container for service ray-head: invalid mount config for type "bind": bind source path does not exist: {token}'
        assert f"ERROR: for ray-head  {reason}" in result.stderr.splitlines()
        assert elapsed < 30
        assert not token.exists()  # no directory made in its place
        assert not RayEmulation(name="fltest-test-notoken").containers(docker_client, include_stopped=True)
        with pytest.raises(Exception) as failure:  # the tools' own compose call says the same, in one line
            RayEmulation(name="fltest-test-notoken", overrides={**SETTINGS, "RAY_TOKEN_FILE": str(token)}).up(
                docker_client
            )
        assert (
            str(failure.value)
            == f"{' '.join(compose_cli())} up (project fltest-test-notoken) failed (exit 1): {reason}"
        )
    finally:
        _plain_compose(env, "down", "--volumes")


def test_a_node_refuses_a_directory_as_token_with_one_line_and_no_restart_loop(docker_client, fltest_image, tmp_path):
    token = tmp_path / "ray_token"
    token.mkdir()
    (token / "stray").write_text("not a token")  # a directory that is not Docker's empty one
    env = _env("fltest-test-dirtoken", token)
    project = RayEmulation(name="fltest-test-dirtoken")
    try:
        start = time.monotonic()
        result = _plain_compose(env, "up", "-d")
        elapsed = time.monotonic() - start
        # Compose returns at once. Usually it fails (the workers wait for a healthy head, which
        # stopped), but docker-compose 1.29 may see the stopped head as healthy and start the
        # workers: then they refuse the token the same way. Either way, no node loops.
        assert elapsed < 60, result.stderr
        time.sleep(15)  # time for a restart loop to show
        nodes = project.containers(docker_client, include_stopped=True)
        assert HEAD_SERVICE in {node.labels[SERVICE_LABEL] for node in nodes}
        for node in nodes:
            node.reload()
            assert (node.status, node.attrs["State"]["ExitCode"], node.attrs["RestartCount"]) == ("exited", 0, 0), (
                node.name
            )
            assert node.logs().decode().strip().splitlines() == [
                "deploy.node.ray_start: RAY_AUTH_TOKEN_PATH=/run/secrets/ray_token: is a directory, not the token file "
                "(run: fltest-deploy token on the host)"
            ], node.name
        up = _fltest_deploy(env, "up", timeout=60)  # the tools refuse it before compose
        assert up.returncode == 2
        assert up.stderr.strip().splitlines() == [
            f"fltest-deploy: error: Ray token {token}: is a directory, not the token file (remove it, then run: fltest-deploy token)"
        ]
    finally:
        _plain_compose(env, "down", "--volumes")


def test_a_compose_failure_names_compose_s_reason_in_one_line(docker_client, fltest_image, tmp_path):
    token = tmp_path / "ray_token"
    ensure_ray_token(token)
    env = _env("fltest-test-cpuset", token, RAY_HEAD_CPUSET="999")  # no such host CPU
    try:
        result = _fltest_deploy(env, "up", timeout=120)
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        expected = (
            f"fltest-deploy: error: {' '.join(compose_cli())} up (project fltest-test-cpuset) failed (exit 1): "
            "Cannot create container for service ray-head: Requested CPUs are not available - requested 999, available: "
        )
        assert line.startswith(expected) and re.fullmatch(r"[0-9,-]+", line[len(expected) :])
    finally:
        _fltest_deploy(env, "down", timeout=120)


def _wait_for_round(head, name: str, server_round: int, run_state: Callable[[], tuple[bool, str]]) -> None:
    """Wait until the staged run ``name``'s flwr metrics in the head have ``server_round`` rounds.

    A precondition, not a bound: ROUND_WAIT_S leaves room for a host loaded by the tiers beside
    this one. ``run_state()`` says whether the run ended, and how it stands (its exit, the end of
    its output): a run that ends first, or does not get there, fails the test with that, not with
    a bare timeout.
    """
    deadline = time.monotonic() + ROUND_WAIT_S
    while time.monotonic() < deadline:
        rounds = head.exec_run(
            ["sh", "-c", f"cat /var/lib/fltest/work/runs/{name}-*/results/{name}/flower/metrics.jsonl"]
        )
        if rounds.exit_code == 0 and len(rounds.output.splitlines()) >= server_round + 1:
            return
        ended, state = run_state()
        if ended:
            pytest.fail(f"the flwr run ended before round {server_round}: {state}")
        time.sleep(1)
    pytest.fail(f"the flwr run did not reach round {server_round} in {ROUND_WAIT_S} s: {run_state()[1]}")


def _process_state(process: subprocess.Popen, stderr_path: Path) -> Callable[[], tuple[bool, str]]:
    """The ``run_state`` of :func:`_wait_for_round` for a ``fltest-deploy run`` process writing its stderr to ``stderr_path``."""

    def state() -> tuple[bool, str]:
        code = process.poll()
        tail = " | ".join(stderr_path.read_text().strip().splitlines()[-5:])
        return (
            code is not None,
            f"{'running' if code is None else f'exit code {code}'}; its stderr ends: {tail or '(nothing)'}",
        )

    return state


def _health(container) -> str:
    container.reload()
    return container.attrs["State"].get("Health", {}).get("Status", "-")


def test_a_worker_cut_off_the_network_fails_the_run_naming_its_container_and_cause(
    emulation, docker_client, tmp_path, tier_report
):
    """``docker network disconnect`` of a worker at round 2: one line naming the container and why, in bounded time."""
    config = _experiment(
        tmp_path / "experiment", "cutoff", rounds=40, timeout_s=120, busy_s=0.5
    )  # Ray notices before the round timeout
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "deploy", "run", str(config), "--results-dir", str(tmp_path / "results")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    network = docker_client.networks.get(f"{PROJECT}_cluster")
    victim = None
    try:
        _wait_for_round(emulation.head(docker_client), "cutoff", 2, _process_state(run, stderr_path))
        victim = _client_hosting_worker(emulation, docker_client)
        cut = time.monotonic()
        network.disconnect(victim)
        unhealthy_after = None
        while run.poll() is None and time.monotonic() - cut < 300:
            if unhealthy_after is None and _health(victim) == "unhealthy":
                unhealthy_after = time.monotonic() - cut
            time.sleep(1)
        failed_after = time.monotonic() - cut
        assert run.poll() is not None, "the run hangs after a worker was cut off"
        while unhealthy_after is None and time.monotonic() - cut < 60:
            if _health(victim) == "unhealthy":
                unhealthy_after = time.monotonic() - cut
            time.sleep(1)
    finally:
        if run.poll() is None:
            run.kill()
        if victim is not None:
            network.connect(victim)
    lines = stderr_path.read_text().splitlines()
    tier_report(
        f"worker cut off at round 2: run failed after {failed_after:.1f} s, worker unhealthy after {unhealthy_after} s"
    )
    assert run.returncode == 1
    failures = [line for line in lines if line.startswith("run flower failed: ")]
    assert len(failures) == 1, lines[-20:]
    assert re.fullmatch(
        rf"run flower failed: round \d+: client \d+ failed: Ray node {re.escape(victim.name)} "
        r"\(\d+\.\d+\.\d+\.\d+\) died \(ActorDiedError\)",
        failures[0],
    ), failures[0]
    assert not any(line.rstrip().endswith("'>") for line in lines)
    assert failed_after < 120
    assert unhealthy_after is not None and unhealthy_after < 60  # Docker no longer reports it healthy
    start = time.monotonic()
    emulation.up(docker_client)  # reconnected: the worker comes back (by itself, or restarted here)
    state = wait_until_ready(emulation, docker_client, READY_TIMEOUT_S)
    tier_report(f"worker reconnected: cluster ready again after {time.monotonic() - start:.1f} s")
    assert len(state.nodes) == 3
    deadline = time.monotonic() + 30  # the healthcheck runs every 5 s
    while _health(victim) != "healthy" and time.monotonic() < deadline:
        time.sleep(1)
    assert _health(victim) == "healthy"


def test_a_worker_killed_during_a_run_fails_it_clearly_and_up_restores_the_cluster(emulation, docker_client, tmp_path):
    config = _experiment(tmp_path / "experiment", "killed", rounds=40, timeout_s=30, busy_s=0.5)
    results = tmp_path / "results"
    outcome: dict = {}
    own_client = docker.from_env()  # the run streams on its own connection
    runner = threading.Thread(
        target=lambda: outcome.update(
            code=run_in_head(emulation.head(own_client), config, load_config(config), results)
        )
    )
    runner.start()
    _wait_for_round(
        emulation.head(docker_client),
        "killed",
        2,
        lambda: ("code" in outcome, f"exit code {outcome['code']}" if "code" in outcome else "running"),
    )
    victim = _client_hosting_worker(emulation, docker_client)  # the run then loses one of its clients
    hostname = victim.attrs["Config"]["Hostname"]
    killed_node = [n["node_id"] for n in live_ray_nodes(emulation.head(docker_client)) if n["hostname"] == hostname]
    victim.kill()
    killed = time.monotonic()
    runner.join(timeout=600)
    assert not runner.is_alive(), "the run hangs after a worker was killed"
    failed_after = time.monotonic() - killed
    summary = json.loads((results / "killed" / "flower" / "summary.json").read_text())
    assert (outcome["code"], summary["status"]) == (1, "failed"), summary
    # the one line names the killed container and what happened to it (not "no reply in time")
    assert re.search(
        rf"Ray node {re.escape(victim.name)} \(\d+\.\d+\.\d+\.\d+\) (died \(ActorDiedError\)|became unreachable: "
        r"stopped, or cut off from the driver \(ActorUnavailableError\))",
        summary["error"],
    ), summary["error"]
    assert failed_after < 30 + REPLY_GRACE_S, failed_after  # faults.md: seconds, not the round's timeout and grace
    emulation.up(docker_client)
    state = wait_until_ready(emulation, docker_client, READY_TIMEOUT_S)
    assert len(state.nodes) == 3 and state.cpus == 3.0
    # Ready with the worker's new Ray node: Ray lists the killed one as alive until it misses its
    # heartbeats, and a run started on it hung at round 0 (the next test, with a quiet host).
    serving = [n["node_id"] for n in live_ray_nodes(emulation.head(docker_client)) if n["hostname"] == hostname]
    assert len(killed_node) == 1 and len(serving) == 1 and serving != killed_node, (killed_node, serving)


CRASH = (  # SIGKILL to the node's main process (PID 1 is the container's init, which then exits 137), as the OOM killer
    "import os, signal; os.kill(int(open('/proc/1/task/1/children').read().split()[0]), signal.SIGKILL)"
)


def test_a_worker_that_crashes_restarts_by_itself_and_rejoins_the_cluster(emulation, docker_client):
    """faults.md: a docker-killed node stays down until ``up``; one that crashes (its main process killed, exit 137)
    comes back by itself (``restart: on-failure``) and serves the cluster as a new Ray node."""
    victim = emulation.containers(docker_client, WORKER_SERVICE)[-1]
    hostname = victim.attrs["Config"]["Hostname"]
    restarts = victim.attrs["RestartCount"]
    before = [n["node_id"] for n in live_ray_nodes(emulation.head(docker_client)) if n["hostname"] == hostname]
    try:
        victim.exec_run(["python", "-c", CRASH])
    except docker.errors.APIError:  # the exec ends with the container
        pass
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        victim.reload()
        if victim.attrs["RestartCount"] > restarts and victim.status == "running":
            break
        time.sleep(1)
    assert victim.attrs["RestartCount"] == restarts + 1 and victim.status == "running", victim.attrs["State"]
    state = wait_until_ready(emulation, docker_client, READY_TIMEOUT_S)
    assert len(state.nodes) == 3 and state.cpus == 3.0
    serving = [n["node_id"] for n in live_ray_nodes(emulation.head(docker_client)) if n["hostname"] == hostname]
    assert len(before) == 1 and len(serving) == 1 and serving != before, (before, serving)


def _deploy_run_as_a_user(tmp_path: Path, env: dict[str, str], config: Path, stderr_path: Path) -> subprocess.Popen:
    """``fltest-deploy run <config>`` from ``tmp_path`` with a relative config and the default results folder, in a
    session of its own, SIGINT handled as in a terminal."""
    with stderr_path.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "deploy", "run", str(config.relative_to(tmp_path))],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


FLOWER_PROCESSES = ("flower-superlink", "flower-superexec", "flwr-simulation")  # what a Flower simulation starts


def _flower_processes(head) -> list[str]:
    """The command lines of the Flower simulation's processes still running in ``head`` (its SuperLink and what the
    SuperLink started, in sessions of their own)."""
    probe = (
        "import json, os, psutil; print(json.dumps([' '.join(p.cmdline()) for p in psutil.process_iter() "
        f"if p.pid != os.getpid() and any(name in ' '.join(p.cmdline()) for name in {list(FLOWER_PROCESSES)!r})]))"
    )
    return json.loads(head.exec_run(["python", "-c", probe]).output.decode().strip().splitlines()[-1])


def _client_hosting_worker(emulation, docker_client):
    """A worker container that hosts one of the running Flower simulation's ClientApp actors (a worker that hosts
    none, a Ray node the run does not use, would not fail the run when killed or cut off)."""
    probe = (
        "import json, ray; ray.init(address='ray-head:6379', logging_level='ERROR'); "
        "print(json.dumps([a['Address']['IPAddress'] for a in ray._private.state.state.actor_table(None).values() "
        "if a['ActorClassName'] == 'ClientAppActor' and a['State'] == 'ALIVE']))"
    )
    network = f"{PROJECT}_cluster"
    deadline = time.monotonic() + 60
    while True:
        output = emulation.head(docker_client).exec_run(["python", "-c", probe]).output.decode().strip()
        hosts = set(json.loads(output.splitlines()[-1]))
        for worker in emulation.containers(docker_client, WORKER_SERVICE):
            if worker.attrs["NetworkSettings"]["Networks"][network]["IPAddress"] in hosts:
                return worker
        assert time.monotonic() < deadline, f"no worker hosts a ClientApp actor: actors on {sorted(hosts)}"
        time.sleep(2)


def _ray_cpus_free(head) -> tuple[float, float]:
    """The cluster's available and total CPUs, asked by a driver in the head."""
    probe = (
        "import ray; ray.init(address='ray-head:6379', logging_level='ERROR'); "
        "print(ray.available_resources().get('CPU', 0), ray.cluster_resources().get('CPU', 0))"
    )
    result = head.exec_run(["python", "-c", probe])
    free, total = result.output.decode().strip().splitlines()[-1].split()
    return float(free), float(total)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_stopping_fltest_deploy_run_stops_the_run_in_the_head_and_brings_its_rounds_back(
    emulation, docker_client, tmp_path, tier_report, how
):
    """Ctrl-C (SIGINT to the command's process group) or SIGTERM (to it alone) at round 2 of 300: the fltest run in the
    head stops within the bound, its rounds and an ``interrupted`` summary reach the host, nothing of it runs on."""
    name, signal_name = f"stop{how.replace('-', '')}", "SIGINT" if how == "ctrl-c" else "SIGTERM"
    config = _experiment(tmp_path / "experiment", name, rounds=300)
    stderr_path = tmp_path / "stderr.txt"
    run = _deploy_run_as_a_user(tmp_path, _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"]), config, stderr_path)
    head = emulation.head(docker_client)
    try:
        _wait_for_round(head, name, 2, _process_state(run, stderr_path))
        if how == "ctrl-c":
            os.killpg(run.pid, signal.SIGINT)
        else:
            run.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        run.wait(timeout=120)
        stopped_after = time.monotonic() - signalled
    finally:
        if run.poll() is None:
            run.kill()
    tier_report(
        f"fltest-deploy run stopped by {signal_name} at round 2: exit {run.returncode} after {stopped_after:.1f} s"
    )
    lines = stderr_path.read_text().strip().splitlines()
    assert run.returncode == 130, lines[-20:]
    assert re.fullmatch(
        rf"fltest-deploy: interrupted \({signal_name}\): fltest run in {re.escape(head.name)} \(runs/{name}-\d{{8}}-\d{{6}}\)"
        rf" stopped; its rounds so far and summary: results/{name}",
        lines[-1],
    ), lines[-20:]
    summary = json.loads((tmp_path / "results" / name / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["rounds_completed"] < 300, summary
    assert (
        len((tmp_path / "results" / name / "flower" / "metrics.jsonl").read_text().splitlines())
        == summary["rounds_completed"] + 1
    )
    assert stopped_after < 45  # the 30 s, with room for a loaded host
    assert runs_in(head) == []  # no fltest run left in the head
    assert _flower_processes(head) == []  # nor its simulation SuperLink
    assert head.exec_run(["ls", "/var/lib/fltest/work/runs"]).output.decode().split() == []  # nor its staged folder
    deadline = time.monotonic() + 30  # the driver's actors end with it: every CPU free again
    while (cpus := _ray_cpus_free(head))[0] != cpus[1] and time.monotonic() < deadline:
        time.sleep(2)
    assert cpus[0] == cpus[1] == 3.0, cpus


def test_a_run_left_by_a_killed_fltest_deploy_is_refused_by_the_next_and_stop_brings_its_results_back(
    emulation, docker_client, tmp_path
):
    """``fltest-deploy run`` killed outright (SIGKILL): its run goes on in the head; the next ``run`` refuses in one line
    naming it and how to stop it; ``fltest-deploy stop`` stops it (as Ctrl-C) and brings its results back."""
    config = _experiment(tmp_path / "experiment", "orphan", rounds=300)
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    stderr_path = tmp_path / "stderr.txt"
    run = _deploy_run_as_a_user(tmp_path, env, config, stderr_path)
    head = emulation.head(docker_client)
    _wait_for_round(head, "orphan", 2, _process_state(run, stderr_path))
    run.kill()
    run.wait()
    (left,) = runs_in(head)
    refused = subprocess.run(
        [sys.executable, "-m", "deploy", "run", "experiment/experiment.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1
    assert re.fullmatch(
        rf"fltest-deploy: error: {re.escape(head.name)} still runs an experiment: fltest run of runs/orphan-\d{{8}}-\d{{6}}"
        rf" \(pid {left['pid']}, since \d\d:\d\d:\d\d\); stop it and bring its results back with: fltest-deploy stop",
        refused.stderr.strip(),
    ), refused.stderr
    stop = _fltest_deploy(env, "stop", "--results-dir", str(tmp_path / "rescued"), timeout=180)
    assert stop.returncode == 0, stop.stderr
    rescued = tmp_path / "rescued" / left["run_id"]
    assert stop.stdout.splitlines() == [
        f"{head.name}: fltest run of runs/{left['run_id']} (pid {left['pid']}, since "
        f"{time.strftime('%H:%M:%S', time.localtime(left['started']))}): stopped",
        f"results of a run cut short, kept from the work volume: {rescued}",
    ]
    summary = json.loads((rescued / "orphan" / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] >= 2, summary
    assert runs_in(head) == [] and head.exec_run(["ls", "/var/lib/fltest/work/runs"]).output.decode().split() == []
    assert _flower_processes(head) == []


def test_the_head_killed_during_a_run_leaves_its_results_on_the_host_and_down_keeps_them(
    emulation, docker_client, tmp_path, tier_report
):
    config = _experiment(tmp_path / "experiment", "headkill", rounds=40, timeout_s=120)
    env = _env(PROJECT, emulation.overrides["RAY_TOKEN_FILE"])
    results = tmp_path / "results"
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "deploy", "run", str(config), "--results-dir", str(results)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        head = emulation.head(docker_client)
        _wait_for_round(head, "headkill", 2, _process_state(run, stderr_path))
        killed = time.monotonic()
        head.kill()
        run.wait(timeout=120)
        failed_after = time.monotonic() - killed
    finally:
        if run.poll() is None:
            run.kill()
    tier_report(f"head killed at round 2: run failed after {failed_after:.1f} s")
    assert run.returncode == 1
    assert stderr_path.read_text().strip().splitlines()[-1] == (
        f"fltest-deploy: error: {head.name} stopped during the run (exited, exit code 137): "
        f"partial results copied to {results / 'headkill'}"
    )
    assert failed_after < 60
    assert json.loads((results / "headkill" / "reference" / "summary.json").read_text())["status"] == "completed"
    assert len((results / "headkill" / "flower" / "metrics.jsonl").read_text().splitlines()) >= 3  # rounds 0-2
    start = time.monotonic()
    emulation.up(docker_client)
    wait_until_ready(emulation, docker_client, READY_TIMEOUT_S)
    tier_report(f"head restarted by up: cluster ready after {time.monotonic() - start:.1f} s")
    rescued = tmp_path / "rescued"
    down = _fltest_deploy(env, "down", "--results-dir", str(rescued), timeout=180)
    assert down.returncode == 0, down.stderr
    (run_folder,) = rescued.iterdir()  # the staged copy the stopped head kept, taken out of the volume before it went
    assert run_folder.name.startswith("headkill-")
    assert down.stdout.strip().splitlines()[0] == f"results of a run cut short, kept from the work volume: {run_folder}"
    assert (run_folder / "headkill" / "reference" / "summary.json").is_file()
    assert emulation.leftovers(docker_client) == []


def test_down_leaves_no_container_network_or_volume(emulation, docker_client):
    emulation.down()
    assert emulation.leftovers(docker_client) == []
