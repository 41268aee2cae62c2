"""The flwr backend with real Flower and real Ray: private runs, a 2-node cluster, failures."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time

import cloudpickle
import psutil
import pytest
import ray
import yaml

from fltest.backends.flwr.client_app import make_client_app
from fltest.backends.flwr.cluster import hold_shards
from fltest.backends.flwr.shard_sources import ObjectStoreShards
from fltest.backends.flwr_deployment.connection import CONNECTION, LoadedFlwr, flwr_json, write_connection
from fltest.backends.flwr_deployment.loaded_cli import MODULE as LOADED_CLI
from fltest.backends.supervision.deadlines import REPLY_GRACE_S
from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import cache_key, prepare_shards
from fltest.errors import RunFailed
from fltest.runner import run_experiment
from tests.conformance import assert_conforms
from tests.conftest import REPO, failing_round_seconds
from tests.ray_cluster import head_and_node

pytestmark = pytest.mark.ray
FREEZE_TIMEOUT_S = (
    5  # the frozen client's round_timeout_s (round 1 trains in it, 0.1 s idle): the server waits 5 s and its 10 s grace
)
FROZEN_S = 25  # how long that client stays frozen: well after the server gave up on it


def _config(
    clients=4, rounds=3, hooks=None, fraction=1.0, name="flwr-test", partition=None, total_cpus=2, round_timeout_s=60
) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": name,
            "seed": 7,
            "dataset": {"source": "digits", "scale": 16.0},
            "partition": partition or {"method": "dirichlet", "alpha": 1.0, "min_samples_per_client": 10},
            "clients": clients,
            "training": {
                "rounds": rounds,
                "local_epochs": 1,
                "learning_rate": 0.5,
                "fraction_fit": fraction,
                "round_timeout_s": round_timeout_s,
            },
            "total_cpus": total_cpus,
            "hooks": hooks,
            "output": {"save_round_models": True},
            "runs": [{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr"}],
        }
    )


def _summary(experiment_dir, run):
    return json.loads((experiment_dir / run / "summary.json").read_text())


def test_private_run_matches_the_reference(tmp_path, monkeypatch):
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    comparison = run_experiment(_config(fraction=0.5), tmp_path)
    assert [r["status"] for r in comparison["runs"]] == ["completed", "completed"]
    assert_conforms(tmp_path / "flwr-test", "flower", 3)
    summary = _summary(tmp_path / "flwr-test", "flower")
    assert summary["ray_address"] == "local"
    assert (
        summary["final"]["accuracy"] > 0.5
    )  # learned (chance: 0.1); 2 of 4 Dirichlet clients a round, 3 rounds: 0.63 with seed 7, 0.81-0.83 with seeds 0-3
    assert not ray.is_initialized()  # Flower shut its private Ray down
    saved = yaml.safe_load((tmp_path / "flwr-test" / "config.yaml").read_text())
    assert saved["runs"][1] == {
        "name": "flower",
        "framework": "flwr",
        "options": {"mode": "simulation"},
    }  # its default, listed


def test_a_client_that_raises_fails_the_run_quickly(tmp_path, monkeypatch, write_config):
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    (tmp_path / "raising_hooks.py").write_text(
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if server_round == 2 and partition_id == 1:\n"
        "        raise ValueError('client one broke')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    comparison = run_experiment(_config(hooks="raising_hooks"), tmp_path)
    # Seconds, not the 60 s round timeout: from round 1's end (start-up excluded); 30 s leaves room for a loaded machine.
    assert failing_round_seconds(tmp_path / "flwr-test" / "flower") < 30
    flower = _summary(tmp_path / "flwr-test", "flower")
    assert flower["status"] == "failed"
    assert flower["rounds_completed"] == 1
    assert "round 2: client 1 failed" in flower["error"] and "client one broke" in flower["error"]
    assert comparison["runs"][1]["status"] == "failed"


def test_a_client_that_hangs_fails_the_run_at_the_round_timeout(tmp_path, monkeypatch):
    """The README's promise: a missing reply fails the run after ``round_timeout_s``, and fltest returns."""
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    (tmp_path / "hanging_hooks.py").write_text(
        "import time\n"
        "import ray\n"
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if ray.is_initialized() and server_round == 2 and partition_id == 1:  # not the reference run\n"
        "        time.sleep(400)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _config(hooks="hanging_hooks", round_timeout_s=30)  # 10 s is too short for discovery when loaded
    start = time.monotonic()
    run_experiment(config, tmp_path)
    returned_after = time.monotonic() - start
    flower = _summary(tmp_path / "flwr-test", "flower")
    assert flower["status"] == "failed"
    assert flower["rounds_completed"] == 1
    assert flower["error"] == "round 2: client 1 failed: local training did not finish within round_timeout_s (30 s)"
    # The round waits its 30 s; 45 s more leave room for a loaded machine, far from the 400 s hang.
    assert 30 <= failing_round_seconds(tmp_path / "flwr-test" / "flower") < 75
    assert returned_after < 300  # before the fix, run_experiment returned only once the hook woke up
    assert not ray.is_initialized()


def test_a_client_that_raises_in_round_1_is_named_by_its_partition(tmp_path, monkeypatch):
    """Round 1 is where a user's bug shows, and with every client training the server knows no partition yet:
    it asks the failing node which it holds before it says so (it once said ``client on Flower node <id>``)."""
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    (tmp_path / "first_round_hooks.py").write_text(
        "import ray\n"
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if ray.is_initialized() and partition_id == 1:  # not the reference run\n"
        "        raise ValueError('client one broke')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run_experiment(_config(clients=3, rounds=2, hooks="first_round_hooks"), tmp_path)
    flower = _summary(tmp_path / "flwr-test", "flower")
    assert (flower["status"], flower["rounds_completed"]) == ("failed", 0), flower
    assert re.fullmatch(r"round 1: client 1 failed: .*client one broke", flower["error"]), flower["error"]


def test_a_client_that_sends_no_reply_at_all_fails_the_round_as_no_reply_in_time(tmp_path, monkeypatch):
    """The README's promise: a client that sends none (its machine gone) fails the round as ``no reply in time``,
    after ``round_timeout_s`` and the server's grace; the round is never silently shorter.

    The client's Ray worker is frozen (SIGSTOP): not even its own time limit answers. A helper lets it go on
    (SIGCONT) well after the server gave up, so that Flower, which waits for its workers, can end.
    """
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    (tmp_path / "freezing_hooks.py").write_text(
        "import os, signal, subprocess\n"
        "import ray\n"
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if ray.is_initialized() and server_round == 2 and partition_id == 1:  # not the reference run\n"
        f"        subprocess.Popen(['sh', '-c', f'sleep {FROZEN_S}; kill -CONT {{os.getpid()}}'])\n"
        "        os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run_experiment(_config(clients=2, rounds=2, hooks="freezing_hooks", round_timeout_s=FREEZE_TIMEOUT_S), tmp_path)
    flower = _summary(tmp_path / "flwr-test", "flower")
    assert (flower["status"], flower["rounds_completed"]) == ("failed", 1), flower
    assert flower["error"] == "round 2: no reply in time from client 1"
    # The server waited the round's timeout and its grace for the reply, then failed it; the run ended once the frozen worker went on.
    assert FREEZE_TIMEOUT_S + REPLY_GRACE_S <= failing_round_seconds(tmp_path / "flwr-test" / "flower") < FROZEN_S + 60
    assert not ray.is_initialized()


def test_round_times_are_the_rounds_not_the_log_s_batches(tmp_path, monkeypatch):
    """The ServerApp's lines reach fltest through Flower's log in batches (0.2 s uploads, 0.5 s streams): several
    rounds of 0.1 s arrive at once. Each round's recorded time is still its own: at least its clients' training."""
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    (tmp_path / "timed_hooks.py").write_text(
        "import time\ndef before_local_training(partition_id, server_round, x, y):\n    time.sleep(0.1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run_experiment(_config(clients=2, rounds=8, hooks="timed_hooks"), tmp_path)
    rounds = [
        json.loads(line) for line in (tmp_path / "flwr-test" / "flower" / "metrics.jsonl").read_text().splitlines()
    ]
    times = [r["round_s"] for r in rounds if r["round"] > 0]
    assert len(times) == 8 and min(times) >= 0.1, times  # two clients on two CPUs: 0.1 s of sleep each, at once
    assert sum(times) <= rounds[-1]["elapsed_s"], times


def test_a_simulation_superlink_that_cannot_start_fails_the_run_in_one_line_naming_it(tmp_path, monkeypatch):
    """Its port taken (the kernel's free port, taken before the SuperLink binds it): the run fails with the
    SuperLink's own reason, well within the start-up allowance, and nothing of it is left."""
    from fltest.backends.flwr import superlink

    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    with socket.socket() as taken:
        taken.bind((superlink.HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(superlink, "_free_port", lambda: port)
        start = time.monotonic()
        run_experiment(_config(rounds=1), tmp_path)
        took = time.monotonic() - start
    assert _summary(tmp_path / "flwr-test", "flower")["error"] == (
        f"the simulation SuperLink on 127.0.0.1:{port} did not start (exit 1): [Errno 98] error while attempting to "
        f"bind on address ('127.0.0.1', {port}): address already in use"
    )
    assert took < superlink.START_TIMEOUT_S
    assert not _loaded_clis()  # the flwr process that waited for the SuperLink ended with it


def _loaded_clis() -> list[psutil.Process]:
    """This test process's descendants that run Flower's CLI loaded ahead of its command."""
    return [p for p in psutil.Process().children(recursive=True) if LOADED_CLI in " ".join(p.cmdline())]


def test_a_loaded_flwr_answers_as_the_flwr_executable_does(tmp_path):
    """The same command, to a SuperLink that is not there: the same one-line failure from both; a loaded flwr given
    no command ends and leaves nothing."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there once the probe is closed
    home = write_connection(tmp_path / "home", address, None).parent
    answers = []
    for loaded in (None, LoadedFlwr(home)):
        with pytest.raises(RunFailed) as failed:
            flwr_json(home, "ls", CONNECTION, timeout=60, loaded=loaded)
        answers.append(str(failed.value))
    assert answers[0] == answers[1] and answers[0].startswith("flwr ls: "), answers
    unused = LoadedFlwr(home)
    unused.cancel()
    assert not _loaded_clis()


def test_a_missing_superlink_executable_fails_the_run_in_one_line_naming_it(tmp_path, monkeypatch):
    from fltest.backends.flwr import superlink

    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    monkeypatch.setattr(superlink, "SUPERLINK", "flower-superlink-not-installed")
    run_experiment(_config(rounds=1), tmp_path)
    assert _summary(tmp_path / "flwr-test", "flower")["error"] == (
        f"flower-superlink-not-installed: not found beside {sys.executable} nor on PATH: Flower's simulation needs it "
        "(pip install 'flwr[simulation]==1.42.0')"
    )


def test_two_simulations_at_once_do_not_meet(tmp_path, write_config):
    """Two ``fltest run`` of the same experiment at once, each from its own folder: each starts its own SuperLink (its
    own port and Flower home), and both match the reference."""
    commands = []
    for name in ("first", "second"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.yaml").write_text(
            yaml.safe_dump(_config(rounds=2).model_dump(mode="json", exclude={"hooks"}) | {"name": name})
        )
        commands.append(
            subprocess.Popen(
                [sys.executable, "-m", "fltest.cli", "run", "config.yaml"],
                cwd=folder,
                env={**os.environ, "FLTEST_RAY_ADDRESS": ""},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [command.communicate(timeout=600) for command in commands]
    for (name, command), (_, stderr) in zip((("first", commands[0]), ("second", commands[1])), outputs, strict=True):
        assert command.returncode == 0, stderr
        experiment = tmp_path / name / "results" / name
        assert _summary(experiment, "flower")["status"] == "completed", stderr
        assert_conforms(experiment, "flower", 2)


def test_an_address_with_no_cluster_fails_in_bounded_time(tmp_path, monkeypatch):
    monkeypatch.setenv("FLTEST_RAY_ADDRESS", "127.0.0.1:1")
    start = time.monotonic()
    run_experiment(_config(rounds=1), tmp_path)
    assert time.monotonic() - start < 60
    flower = _summary(tmp_path / "flwr-test", "flower")
    assert flower["status"] == "failed"
    assert flower["error"].startswith("FLTEST_RAY_ADDRESS=127.0.0.1:1: no Ray head answers")


def test_in_memory_and_single_machine_keys_differ(monkeypatch):
    from fltest.backends.flwr.backend import FlwrBackend

    config = _config()
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    single = FlwrBackend().storage(config)
    monkeypatch.setenv("FLTEST_RAY_ADDRESS", "head:6379")
    cluster = FlwrBackend().storage(config)
    assert (single, cluster) == ("mmap", "memory")
    assert cache_key(config, single) != cache_key(config, cluster)


def test_pickled_client_app_stays_small_as_clients_grow(fresh_cache):
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        sizes, naive = {}, {}
        for clients in (10, 120):
            config = _config(clients=clients, partition={"method": "iid"})
            shards, _ = prepare_shards(config, "memory")
            _, holder = hold_shards(shards)
            sizes[clients] = len(cloudpickle.dumps(make_client_app(config, ObjectStoreShards(holder, shards.scale))))
            arrays = [shards.client_arrays(i) for i in range(clients)]
            naive[clients] = len(cloudpickle.dumps(make_client_app(config, arrays.__getitem__)))
    finally:
        ray.shutdown()
    assert sizes[120] < 64_000  # kilobytes, not the data
    assert sizes[120] - sizes[10] < 32_000
    assert naive[120] > 10 * sizes[120]  # the pattern it replaces carries every shard


@pytest.fixture
def two_node_cluster(monkeypatch):
    """A Ray head and one more node (:func:`tests.ray_cluster.head_and_node`)."""
    with head_and_node(monkeypatch) as (cluster, _):
        yield cluster


@pytest.fixture
def cluster_with_a_killed_node(monkeypatch):
    """A Ray head and one more node whose raylet is killed (SIGKILL); the head declares a node dead only after 5 minutes
    (health checks every second, 300 missed), so Ray lists the killed node alive for the whole test."""
    slow_detection = {"health_check_period_ms": 1000, "health_check_failure_threshold": 300}
    with head_and_node(monkeypatch, _system_config=slow_detection) as (_, node):
        node.all_processes["raylet"][0].process.kill()
        yield node


def test_a_node_listed_alive_that_runs_no_task_fails_the_run_with_its_name_before_it_starts(
    tmp_path, monkeypatch, cluster_with_a_killed_node
):
    from fltest.backends.flwr import cluster

    default = f"fails within {cluster.NODE_ANSWER_TIMEOUT_S:g} s naming one"  # faults.md's figure is the default's
    assert default in (REPO / "docs" / "how-to" / "faults.md").read_text(), default
    monkeypatch.setattr(cluster, "NODE_ANSWER_TIMEOUT_S", 10.0)  # here: the same check, shortened
    outcome = {}
    runner = threading.Thread(
        target=lambda: outcome.update(run_experiment(_config(round_timeout_s=20), tmp_path)), daemon=True
    )
    runner.start()
    runner.join(
        timeout=150
    )  # before the fix: Flower waited for the actor placed on the dead node until Ray declared it dead
    assert not runner.is_alive(), "the run still waits for the killed node"
    assert [r["status"] for r in outcome["runs"]] == ["completed", "failed"]
    error = _summary(tmp_path / "flwr-test", "flower")["error"]
    ip = cluster_with_a_killed_node.node_ip_address
    assert (
        error.startswith("Ray node ")
        and f"({ip}) is listed alive but ran no task within 10 s" in error
        and "\n" not in error
    ), error


def test_cluster_run_spreads_clients_puts_each_shard_once_and_matches(tmp_path, monkeypatch, two_node_cluster, caplog):
    node_log = tmp_path / "nodes.txt"
    (tmp_path / "node_hooks.py").write_text(
        "import ray\n"
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if not ray.is_initialized():  # the reference run, in the driver\n"
        "        return None\n"
        f"    with open({str(node_log)!r}, 'a') as f:\n"
        "        f.write(ray.get_runtime_context().get_node_id() + '\\n')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # reaches the workers through the driver's sys.path
    puts = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(1) or real_put(value, **kw))

    caplog.set_level(logging.INFO, logger="fltest.backends.flwr.backend")
    # total_cpus 8 on a 2-CPU cluster: ignored with FLTEST_RAY_ADDRESS set (the cluster's resources apply), as the log says.
    comparison = run_experiment(_config(clients=6, hooks="node_hooks", total_cpus=8), tmp_path)

    assert [r["status"] for r in comparison["runs"]] == ["completed", "completed"], comparison
    said = [r.getMessage() for r in caplog.records if "total_cpus" in r.getMessage()]
    assert said == [
        f"FLTEST_RAY_ADDRESS={two_node_cluster.address}: joining that Ray cluster; total_cpus/total_gpus are ignored"
    ], said
    assert_conforms(tmp_path / "flwr-test", "flower", 3)
    flower = _summary(tmp_path / "flwr-test", "flower")
    assert flower["ray_address"] == two_node_cluster.address
    assert flower["shards_put"] == 6 and len(puts) == 6
    cluster_nodes = {n.node_id for n in two_node_cluster.list_all_nodes()}
    used = set(node_log.read_text().split())
    assert used == cluster_nodes and len(used) == 2
    assert flower["shards_key"] != _summary(tmp_path / "flwr-test", "reference")["shards_key"]
