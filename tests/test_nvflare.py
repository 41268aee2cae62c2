"""The nvflare backend with the real NVFlare 2.9 simulator: conformance, failures, options, the report."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml

from fltest.backends.nvflare.exchange import SPEC_VARIABLE
from fltest.backends.nvflare.launch_simulator import bound_ports, install
from fltest.backends.nvflare.simulator import SIMULATOR_LAUNCHER
from fltest.backends.supervision import Deadlines
from fltest.config import load_config
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError
from fltest.params import load_params
from fltest.process_guard import POLL_S, STOP_GRACE_S
from fltest.results.files import read_jsonl
from fltest.results.report import IDENTICAL
from fltest.runner import run_experiment
from tests.conformance import TOLERANCE, assert_conforms, max_difference
from tests.conftest import failing_round_seconds

pytestmark = pytest.mark.nvflare
STUCK_STARTUP_S = 8.0  # the start-up allowance of the test whose clients never start (120 s in a run)
SETTLE_S = 3.0  # after SIGKILL: the kernel ends the processes, psutil sees them gone (a loaded 2-core machine)


def _config(runs, rounds=3, hooks=None, fraction=1.0, round_timeout=60, name="nvflare-test") -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": name,
            "seed": 7,
            "dataset": {"source": "digits", "scale": 16.0},
            "partition": {"method": "dirichlet", "alpha": 1.0, "min_samples_per_client": 10},
            "clients": 4,
            "training": {
                "rounds": rounds,
                "local_epochs": 1,
                "learning_rate": 0.5,
                "fraction_fit": fraction,
                "round_timeout_s": round_timeout,
            },
            "total_cpus": 2,
            "hooks": hooks,
            "output": {"save_round_models": True},
            "runs": runs,
        }
    )


REFERENCE = {"name": "reference", "framework": "reference"}
NVFLARE = {"name": "nvflare", "framework": "nvflare"}


def _summary(experiment_dir, run):
    return json.loads((experiment_dir / run / "summary.json").read_text())


def _simulator_processes(tmp_path) -> list[psutil.Process]:
    """Live NVFlare simulator processes (server or worker) of this test's runs."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if ("nvflare.private.fed.app.simulator" in cmdline or SIMULATOR_LAUNCHER in cmdline) and str(
            tmp_path
        ) in cmdline:
            found.append(process)
    return found


def test_run_matches_the_reference_and_ignores_a_ray_address(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FLTEST_RAY_ADDRESS", "127.0.0.1:1")  # nothing listens there: it must not be used
    caplog.set_level(logging.INFO, logger="fltest.backends.nvflare.backend")
    comparison = run_experiment(_config([REFERENCE, NVFLARE], fraction=0.5), tmp_path)

    assert [r["status"] for r in comparison["runs"]] == ["completed", "completed"], comparison
    experiment = tmp_path / "nvflare-test"
    assert_conforms(experiment, "nvflare", 3)
    assert all(a.dtype == np.float64 for a in load_params(experiment / "nvflare" / "models" / "round-0003.npz"))
    ours, theirs = (read_jsonl(experiment / run / "metrics.jsonl") for run in ("nvflare", "reference"))
    assert [r["clients"] for r in ours] == [r["clients"] for r in theirs]
    assert all(len(r["clients"]) == 2 for r in ours[1:])  # fraction_fit 0.5 of 4 clients, seeded
    for mine, ref in zip(ours[1:], theirs[1:]):
        assert mine["train"].keys() == ref["train"].keys()
        assert all(abs(mine["train"][k] - ref["train"][k]) <= TOLERANCE for k in ref["train"])
    summary = _summary(experiment, "nvflare")
    assert (
        summary["final"]["accuracy"] > 0.5
    )  # learned (chance: 0.1); with seed 7 the flwr-datasets Dirichlet split gives the reference 0.63
    assert summary["nvflare_threads"] == 4
    assert json.loads((experiment / "nvflare" / "timings.json").read_text())["setup_s"] > 0

    said = [r.getMessage() for r in caplog.records if "FLTEST_RAY_ADDRESS" in r.getMessage()]
    assert said == ["FLTEST_RAY_ADDRESS is set: the nvflare backend ignores it and runs on this machine"]
    assert not (experiment / "nvflare" / "nvflare").exists()  # keep_workspace defaults to false
    assert yaml.safe_load((experiment / "config.yaml").read_text())["runs"][1]["options"] == {
        "keep_workspace": False,
        "threads": None,  # picked from the machine: the summary says how many
    }  # listed
    assert (experiment / "nvflare" / "simulator.log").stat().st_size > 0
    assert _simulator_processes(tmp_path) == []


def test_a_client_that_raises_fails_the_run_quickly(tmp_path, monkeypatch):
    (tmp_path / "raising_hooks.py").write_text(
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if server_round == 2 and partition_id == 1:\n"
        "        raise ValueError('client one broke')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # reaches the simulator through the driver's sys.path
    comparison = run_experiment(_config([NVFLARE], hooks="raising_hooks", round_timeout=60), tmp_path)
    # Seconds, not the 60 s round timeout: measured from round 1's end (start-up and set-up excluded);
    # about 2 s idle, 30 s leaves room for a loaded 2-core machine.
    assert failing_round_seconds(tmp_path / "nvflare-test" / "nvflare") < 30
    summary = _summary(tmp_path / "nvflare-test", "nvflare")
    assert summary["status"] == "failed"
    assert summary["rounds_completed"] == 1
    assert summary["error"] == "round 2: client 1 failed: ValueError: client one broke"
    assert comparison["runs"][0]["status"] == "failed"
    assert _simulator_processes(tmp_path) == []


def test_a_killed_client_fails_the_run_after_the_round_timeout(tmp_path, monkeypatch):
    (tmp_path / "killing_hooks.py").write_text(
        "import os, signal\n"
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if server_round == 2 and partition_id == 1:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = threading.Thread(
        target=run_experiment, args=(_config([NVFLARE], hooks="killing_hooks", round_timeout=10), tmp_path)
    )
    runner.start()
    seen: list[psutil.Process] = []
    while runner.is_alive() and not seen:  # the matcher that checks for leftovers finds the live simulator
        seen = _simulator_processes(tmp_path)
        time.sleep(0.5)
    runner.join(timeout=600)
    assert not runner.is_alive()
    assert seen, "no live simulator process matched: the leftover check below could not fail"
    # The round fails at its deadline, 10 s + 2 x 10 s of reply grace (the run supervisor's one policy), measured
    # from round 1's end (start-up excluded), plus the simulator's stop: 30-35 s idle; 65 s leaves room for a loaded host.
    assert 30 <= failing_round_seconds(tmp_path / "nvflare-test" / "nvflare") < 65
    summary = _summary(tmp_path / "nvflare-test", "nvflare")
    assert summary["status"] == "failed"
    assert summary["rounds_completed"] == 1
    assert summary["error"].startswith(
        "round 2: no result from the NVFlare simulator within 30 s (round_timeout_s 10 s + 2 x 10 s reply grace)"
    ), summary["error"]
    assert _simulator_processes(tmp_path) == []


@pytest.mark.ray
def test_fltest_killed_outright_leaves_no_simulator_process(tmp_path):
    """``kill -9`` of fltest mid-run: the simulator and its setsid workers end too (fltest.process_guard)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(_config([NVFLARE], rounds=200).model_dump(mode="json")))
    metrics = tmp_path / "results" / "nvflare-test" / "nvflare" / "metrics.jsonl"
    # A killed fltest cannot remove its simulator's temporary folder: give it one this test removes
    # (short: the simulator's Unix socket paths under it must stay below 108 bytes).
    temp = Path(tempfile.mkdtemp(prefix="ftn-", dir="/tmp"))
    fltest = subprocess.Popen(
        [sys.executable, "-m", "fltest.cli", "run", str(config)],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and fltest.poll() is None:  # round 1 in: the workers are up
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the NVFlare run did not reach round 1")
        workers = [p for p in _simulator_processes(tmp_path) if "simulator_worker" in " ".join(p.cmdline())]
        assert workers, "no simulator worker seen"
    finally:
        fltest.kill()
        killed = time.monotonic()
        fltest.wait()
        shutil.rmtree(temp, ignore_errors=True)
    left = _simulator_processes(tmp_path)
    # The guard notices within POLL_S (tests/test_process_guard.py times it), then gives SIGTERM STOP_GRACE_S before SIGKILL.
    deadline = killed + POLL_S + STOP_GRACE_S + SETTLE_S
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [" ".join(p.cmdline())[:120] for p in left]


def _ports_taking_connections_while_chosen(choose_ports) -> list[int]:
    """The ports ``choose_ports(2)`` picks whose probing socket takes a TCP connection before it closes.

    Such a socket takes one from any process that holds a copy of it: a worker forked by another of
    the simulator's client threads at that instant keeps one until it execs.
    """
    real_close = socket.socket.close
    taking = []

    def close_after_a_connect(probe: socket.socket) -> None:
        port = probe.getsockname()[1] if probe.family == socket.AF_INET and probe.fileno() != -1 else 0
        if port:
            attempt = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if attempt.connect_ex(("127.0.0.1", port)) == 0:
                taking.append(port)
            real_close(attempt)  # the real close: this attempt is not a probe
        real_close(probe)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "close", close_after_a_connect)
        chosen = choose_ports(2)
    assert len(set(chosen)) == 2
    return taking


def test_the_simulator_picks_its_workers_ports_with_sockets_that_take_no_connection(monkeypatch):
    """NVFlare 2.9's get_open_ports listens on the ports it picks: a worker forked meanwhile by another
    client thread inherits that listener, the connect meant for the new worker lands on it and is reset
    (a client lost at start, a round that never ends: CI of stop 26). The launcher installs a chooser
    that never listens; with NVFlare's own, this test fails (2 of 2 ports take a connection).
    """
    from nvflare.private.fed.app.simulator import simulator_runner

    monkeypatch.setattr(simulator_runner, "get_open_ports", simulator_runner.get_open_ports)  # restored after
    install()
    assert simulator_runner.get_open_ports is bound_ports
    assert _ports_taking_connections_while_chosen(simulator_runner.get_open_ports) == []


def test_report_draws_reference_flwr_and_nvflare(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure=None: figures.append(figure) or real_close(figure))
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    runs = [REFERENCE, {"name": "flower", "framework": "flwr"}, {**NVFLARE, "options": {"keep_workspace": True}}]
    comparison = run_experiment(_config(runs), tmp_path)

    assert [r["status"] for r in comparison["runs"]] == ["completed"] * 3, comparison
    experiment = tmp_path / "nvflare-test"
    assert (experiment / "report.png").stat().st_size > 10_000
    (figure,) = figures
    accuracy_axis = figure.axes[0]
    labels = [line.get_label() for line in accuracy_axis.get_lines()]
    assert labels == [f"flower ({IDENTICAL})", f"nvflare ({IDENTICAL})", "reference"]  # both conform, bit for bit
    lines = {
        line.get_label().removesuffix(f" ({IDENTICAL})"): list(line.get_ydata()) for line in accuracy_axis.get_lines()
    }
    for run, values in lines.items():
        assert values == [r["test"]["accuracy"] for r in read_jsonl(experiment / run / "metrics.jsonl")]
        assert len(values) == 4  # rounds 0..3
    assert [t.get_text() for t in accuracy_axis.get_legend().get_texts()] == labels
    job_config = experiment / "nvflare" / "nvflare" / "job" / "fltest" / "app" / "config" / "config_fed_server.json"
    assert "fltest.backends.nvflare.server.FLTestFedAvg" in job_config.read_text()  # kept on request


def test_unknown_options_and_a_bad_keep_workspace_are_input_errors(tmp_path):
    def load(options: dict):
        path = tmp_path / "config.yaml"
        path.write_text(
            yaml.safe_dump(_config([REFERENCE]).model_dump(mode="json") | {"runs": [{**NVFLARE, "options": options}]})
        )
        return load_config(path)

    unknown = r": runs\.nvflare\.options\.workers: unknown option for nvflare \(known: keep_workspace, threads\)$"
    with pytest.raises(InputError, match=unknown):
        load({"workers": 2})
    for threads in (0, True, 1.5):
        with pytest.raises(InputError, match=r": runs\.nvflare\.options\.threads: Input should be "):
            load({"threads": threads})
    with pytest.raises(
        InputError, match=r": runs\.nvflare\.options\.keep_workspace: must be true or false, got 'yes'$"
    ):
        load({"keep_workspace": "yes"})
    assert load({"keep_workspace": True}).runs[0].options.keep_workspace is True


def test_fltest_validate_refuses_more_threads_than_clients(tmp_path):
    path = tmp_path / "config.yaml"
    data = _config([REFERENCE]).model_dump(mode="json") | {"runs": [{**NVFLARE, "options": {"threads": 5}}]}
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "fltest"), "validate", "config.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "fltest: error: config.yaml: runs.nvflare.options.threads: 5 is above clients: 4"
    ], done.stderr


def test_fewer_threads_than_clients_swap_clients_and_keep_scaffold_s_control_variates(tmp_path, caplog):
    """2 clients at once of 4: every task of a client runs in a worker process of its own, and SCAFFOLD's c_i, kept in
    the run's files, gives the model of one process a client bit for bit."""
    caplog.set_level(logging.INFO, logger="fltest.backends.nvflare.backend")
    runs = [{**NVFLARE, "name": "every-client"}, {**NVFLARE, "name": "two-at-once", "options": {"threads": 2}}]
    data = _config(runs).model_dump(mode="json")
    data["training"]["strategy"] = {"name": "scaffold", "server_learning_rate": 0.5}
    comparison = run_experiment(ExperimentConfig.model_validate(data), tmp_path)

    assert [r["status"] for r in comparison["runs"]] == ["completed", "completed"], comparison
    assert max_difference(tmp_path / "nvflare-test", "two-at-once", 3, reference="every-client") == 0.0
    assert [_summary(tmp_path / "nvflare-test", run)["nvflare_threads"] for run in ("every-client", "two-at-once")] == [
        4,
        2,
    ]
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("nvflare: simulating")]
    assert started[0].startswith("nvflare: simulating 4 clients, 4 at once (every client); log: "), started
    assert started[1].startswith("nvflare: simulating 4 clients, 2 at once (options.threads); log: "), started
    assert _simulator_processes(tmp_path) == []


def test_a_worker_process_that_never_connects_starts_the_simulator_again_and_the_run_completes(
    tmp_path, monkeypatch, caplog
):
    """NVFlare's simulator gives up on a worker process that does not listen for it within 60 s, and that client never
    runs (seen once in CI, on a loaded machine). Here the first worker process of the run exits at once (a
    ``sitecustomize`` on the workers' path): FLTest starts the simulator again, once, and the model is the reference's."""
    marker = tmp_path / "first-worker-exited"
    (tmp_path / "sitecustomize.py").write_text(
        "import os\n"
        "if b'simulator_worker' in open('/proc/self/cmdline', 'rb').read():\n"
        "    try:\n"
        f"        os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL))\n"
        "    except FileExistsError:\n"
        "        pass\n"
        "    else:\n"
        "        os._exit(3)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="fltest.backends.nvflare.backend"):
        run_experiment(_config([REFERENCE, NVFLARE], rounds=2), tmp_path)

    assert marker.exists()  # a worker did exit
    summary = _summary(tmp_path / "nvflare-test", "nvflare")
    assert summary["status"] == "completed", summary
    assert max_difference(tmp_path / "nvflare-test", "nvflare", 2) == 0.0
    assert (
        "Failed to create connection to the child process"
        in (tmp_path / "nvflare-test" / "nvflare" / "simulator.log").read_text()
    )
    assert any("a worker process never connected" in r.getMessage() for r in caplog.records), caplog.text
    assert _simulator_processes(tmp_path) == []


def test_clients_that_never_start_fail_the_run_within_the_start_up_allowance(tmp_path, monkeypatch):
    """A client stuck before it has its shard (here its hooks module, in the simulator's workers only): the run fails
    when the start-up allowance ends, saying how many clients started, not after round 1's whole deadline."""
    (tmp_path / "stuck_hooks.py").write_text(
        f"import os, time\nif {SPEC_VARIABLE!r} in os.environ:\n    time.sleep(600)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        Deadlines,
        "of",
        classmethod(lambda cls, config: cls(config.training.round_timeout_s, startup_s=STUCK_STARTUP_S)),
    )
    run_experiment(_config([NVFLARE], hooks="stuck_hooks", round_timeout=60), tmp_path)

    summary = _summary(tmp_path / "nvflare-test", "nvflare")
    assert summary["status"] == "failed" and summary["rounds_completed"] == 0, summary
    assert summary["error"].startswith(
        f"the NVFlare simulator: 0 of 4 clients started within {STUCK_STARTUP_S:g} s ("
    ), summary["error"]
    assert _simulator_processes(tmp_path) == []
