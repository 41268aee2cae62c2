"""Benchmark: FLTest's time per round, time to round 1 and peak memory against a minimal app of each framework.

For each framework mode, a bare app written as that framework's docs teach (bench/bare/, importing
only the framework, numpy and pyarrow) trains softmax regression with the same local SGD on the same
partitions (FLTest's prepared shard set) as FLTest's run of the same config. Each side is one whole
process (``fltest run``, ``flwr run`` or ``python bench/bare/<app>.py``), alternating, ``--repeat`` times; the
table gives medians (a bare job that hangs is killed with its workers after 300 s and run again, said on
stderr). Time per round is the median of rounds 2..R (each ends when the global model is evaluated; a Flower
ServerApp's rounds as it timed them, since Flower's log brings its lines to the host in batches);
time to round 1 runs from the process's start until the bench reads the line the process writes as round
1 ends (FLTest's as it records the round, a bare app's as it evaluates). FLTest's process does its own
work before the framework starts (it checks the config and its data, prepares the shard set); the
``fltest run→round 1`` column leaves it out: it is what FLTest's table charges the framework, from the
run's start (``summary.json``'s ``started_at``) to round 1. Peak memory is the largest sum of the resident
memory of the process and everything it started (a SuperLink, Ray's processes, the simulator's workers),
sampled every 0.5 s; pages shared between processes (Ray's object store) count once a process.

``flower-simulation``: the bare Flower App (bench/bare/flower_app/, ``flwr new``'s layout) run as a Flower user
runs one today, ``flwr run . --stream --federation-config "num-supernodes=N ..."`` with a fresh ``FLWR_HOME``:
the CLI starts its local simulation SuperLink, which the bench stops after each run (the CLI leaves it
running). Runtime dependency installation is off for it (``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``),
as FLTest's SuperLink has it: the App's dependencies are installed, and a ``uv sync`` per run would time
an installation. ``RAY_ADDRESS=local``: a Ray of its own, as FLTest's. ``flower-before``: FLTest's Flower
simulation before it moved to ``flwr run`` (``run_simulation`` in the fltest process, commit
:data:`BEFORE_REVISION`, checked out into a temporary git worktree) in the bare app's columns, against
FLTest now: what the move costs.

``flower-deployment`` (Docker, the image ``fltest:0.1.0``; not run unless named in ``--modes``) brings up
the Flower deployment emulation in a compose project of its own (``fltest-flower-bench``, its secrets and
partitions in a temporary folder) with N SuperNodes (``--supernodes``), the partitions prepared from the
config FLTest runs; it alternates ``fltest-flower run <config>`` with the bare Flower App
run by ``fltest-flower flwr run <app> fltest --stream``, and removes the project at the end (``fltest-flower down``).
Both sides' rounds end when the host reads them from Flower's log stream: FLTest's driver records a
round when its ServerApp's line arrives through ``flwr log --stream``; the bare App's round ends when its
ServerApp's line arrives on the host through ``flwr run --stream``.
A deployment starts one ``flwr-clientapp`` process per message, so FLTest's share of its round is
the import of the ClientApp module the App names: the ``clientapp import`` lines time it against
``import flwr.clientapp`` (whole interpreters, alternating, medians).
Run: ``python bench/bare_apps.py [--clients 10 120] [--rounds 5] [--repeat 3]
[--modes flower-simulation flower-before nvflare] [--modes flower-deployment --supernodes 2 4]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

from deploy.images import IMAGE
from deploy.node.superlink_flwr import SUPERLINK_ADDRESS
from fltest.backends.flwr_deployment.app_dir import CLIENT_COMPONENT
from fltest.backends.flwr_deployment.connection import flwr_cli
from fltest.config.schema import ExperimentConfig
from fltest.data.saved_table import saved_arrays
from fltest.data.shard_cache import prepare_shards
from fltest.process_guard import stop_processes

REPO = Path(__file__).resolve().parents[1]
BARE = REPO / "bench" / "bare"
SIMULATION = "flower-simulation"
BEFORE = "flower-before"
DEPLOYMENT = "flower-deployment"
SCRIPTS = {"nvflare": "nvflare_simulator.py"}  # bare apps run as scripts
MODES = (SIMULATION, BEFORE, "nvflare")  # on this machine, without Docker
RUNS = {
    SIMULATION: {"framework": "flwr"},
    BEFORE: {"framework": "flwr"},
    "nvflare": {"framework": "nvflare"},
    DEPLOYMENT: {"framework": "flwr"},
}
# FLTest's last commit whose Flower simulation ran run_simulation in the fltest process (flower-before's side).
BEFORE_REVISION = "508aad6"
SAMPLE_S = 0.5  # how often peak memory is sampled
BARE_TIMEOUT_S = 300.0  # a bare job's whole process (10 clients take under a minute here); then it is run again
BARE_ATTEMPTS = 3
TRAINING = {"local_epochs": 1, "batch_size": 32, "learning_rate": 0.1, "round_timeout_s": 600}
FLTEST_RUN = [sys.executable, "-m", "fltest.cli", "run"]
FLOWER = [sys.executable, "-m", "deploy.commands.fltest_flower"]
PROJECT = "fltest-flower-bench"  # the bench's own compose project: a user's federation is left alone
APP_PACKAGE = "bare_flower_app"  # bench/bare/flower_app's package
# (time to round 1 from the process's start, time per round, time to round 1 from the run's start, in seconds; peak
# memory in MB) of each process; a bare app's run starts with its process
Times = list[tuple[float, float, float, float]]


def _config(mode: str, clients: int, rounds: int, cpus: int) -> dict:
    return {
        "name": f"bare-{mode}-{clients}",
        "dataset": {"source": "digits", "scale": 16.0},
        "partition": {"method": "iid"},
        "clients": clients,
        "model": {"type": "logreg"},
        "training": {"rounds": rounds, **TRAINING},
        "total_cpus": cpus,
        "runs": [{"name": mode, **RUNS[mode]}],
    }


class Hung(Exception):
    """A process outlived its timeout; it and every process it started were killed."""


class PeakMemory:
    """The largest summed resident memory of a process and its descendants, sampled in a thread until :meth:`stop`."""

    def __init__(self, pid: int) -> None:
        """Start sampling process ``pid``'s tree every :data:`SAMPLE_S`."""
        self.peak_bytes = 0
        self._root = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            total = 0
            try:
                processes = [self._root, *self._root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for process in processes:
                try:
                    total += process.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            self.peak_bytes = max(self.peak_bytes, total)

    def stop(self) -> float:
        """Stop sampling; the peak in MB."""
        self._stop.set()
        self._thread.join()
        return self.peak_bytes / 1e6


def _run(
    command: list[str], cwd: Path | None, env: dict[str, str] | None = None, timeout: float | None = None
) -> tuple[str, float]:
    """Run ``command`` to its end; its output and peak memory (MB). A failure raises, naming the command, with its
    output's last lines; a process still running after ``timeout`` s is killed with its process group (:class:`Hung`)."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    memory = PeakMemory(process.pid)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the NVFlare simulator's workers with it
        process.communicate()
        raise Hung(f"{' '.join(command)}: still running after {timeout:g} s, killed") from None
    finally:
        peak_mb = memory.stop()
    if process.returncode != 0:
        output = (stdout + stderr)[-3000:]
        raise RuntimeError(f"{' '.join(command)}: exit {process.returncode}\n{output}")
    return stdout, peak_mb


def _timed_lines(command: list[str], cwd: Path | None, env: dict[str, str]) -> tuple[list[tuple[float, str]], float]:
    """Run ``command`` to its end; each line of its output with the wall-clock time it arrived, and its peak memory
    (MB). A failure raises, naming the command, with its output's last lines."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    memory = PeakMemory(process.pid)
    try:
        lines = [(time.time(), line) for line in process.stdout]
        code = process.wait()
    finally:
        peak_mb = memory.stop()
    if code != 0:
        output = "".join(line for _, line in lines)[-3000:]
        raise RuntimeError(f"{' '.join(command)}: exit {code}\n{output}")
    return lines, peak_mb


def _round_times(
    what: str, ends: dict[int, float], start: float, rounds: int, peak_mb: float, first_seen: float | None = None
) -> tuple[float, float, float, float]:
    """(time to round 1 from ``start``, median time per round of rounds 2..R, the same time to round 1, ``peak_mb``)
    from each round's end time; ``first_seen``, when round 1's end was read later than it happened, is when."""
    found = sorted(r for r in ends if r >= 1)
    assert found == list(range(1, rounds + 1)), f"{what}: rounds {found}"
    first = (ends[1] if first_seen is None else first_seen) - start
    return first, statistics.median(ends[r] - ends[r - 1] for r in found[1:]), first, peak_mb


def _fltest(config: dict, work: Path, command: list[str], env: dict[str, str]) -> tuple[float, float, float, float]:
    """One FLTest process, ``command <config> --results-dir <results>`` (``fltest run`` or ``fltest-flower run``):
    (time to round 1, median time per round of rounds 2..R, time to round 1 from the run's start, in seconds; peak
    memory in MB)."""
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    results = work / "results"
    run = config["runs"][0]["name"]
    start = time.time()
    lines, peak_mb = _timed_lines([*command, str(path), "--results-dir", str(results)], work, env)
    first = next(t for t, line in lines if f"{run} round 1/" in line)  # the line fltest logs as it records round 1
    summary = json.loads((results / config["name"] / run / "summary.json").read_text())
    assert summary["status"] == "completed", summary.get("error")
    records = [json.loads(line) for line in (results / config["name"] / run / "metrics.jsonl").read_text().splitlines()]
    in_run = next(r["elapsed_s"] for r in records if r["round"] == 1)
    return first - start, statistics.median(r["round_s"] for r in records if r["round"] >= 2), in_run, peak_mb


def _bare(mode: str, config: dict, shards: Path, work: Path) -> tuple[float, float, float, float]:
    """One bare app's process: (time to round 1, median time per round of rounds 2..R, time to round 1, in seconds;
    peak memory in MB).

    A bare job that hangs (NVFlare 2.9's simulator can wait forever for a worker that lost its port, and has no
    timeout of its own) is killed after :data:`BARE_TIMEOUT_S` and run again, at most :data:`BARE_ATTEMPTS` times
    in all; each hang is printed, so the table says what it leaves out.
    """
    out = work / "rounds.jsonl"
    training = config["training"]
    command = [
        sys.executable,
        str(BARE / SCRIPTS[mode]),
        *("--shards", str(shards), "--clients", str(config["clients"]), "--rounds", str(training["rounds"])),
        *("--epochs", str(training["local_epochs"]), "--batch-size", str(training["batch_size"])),
        *("--lr", str(training["learning_rate"]), "--cpus", str(config["total_cpus"]), "--out", str(out)),
    ]
    for attempt in range(1, BARE_ATTEMPTS + 1):
        out.unlink(missing_ok=True)
        start = time.time()
        try:
            _, peak_mb = _run(command, work, timeout=BARE_TIMEOUT_S)
            break
        except Hung as exc:
            print(f"bare {mode} job {attempt} of at most {BARE_ATTEMPTS} hung: {exc}", file=sys.stderr, flush=True)
            if attempt == BARE_ATTEMPTS:
                raise
    ends = {r["round"]: r["t"] for r in map(json.loads, out.read_text().splitlines())}
    return _round_times(mode, ends, start, training["rounds"], peak_mb)


def _app_settings(config: dict) -> dict[str, object]:
    """The bare Flower App's run config for ``config``."""
    training = config["training"]
    return {
        "num-server-rounds": training["rounds"],
        "local-epochs": training["local_epochs"],
        "batch-size": training["batch_size"],
        "lr": training["learning_rate"],
        "num-supernodes": config["clients"],
    }


def _rounds_printed(lines: list[tuple[float, str]]) -> tuple[dict[int, float], float]:
    """When each of the bare ServerApp's rounds ended (its line's ``t``: Flower's log delivers the lines in batches),
    and when round 1's line arrived."""
    printed = [(arrived, json.loads(line[line.index('{"round"') :])) for arrived, line in lines if '{"round"' in line]
    return {round_["round"]: round_["t"] for _, round_ in printed}, next(a for a, r in printed if r["round"] == 1)


def _stop_local_superlink(flwr_home: Path) -> None:
    """Stop the flwr CLI's local SuperLink of ``flwr_home`` and what it started (the CLI leaves them running)."""
    left = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("FLWR_HOME") == str(flwr_home):
                left.append(process)
        except psutil.Error:
            continue
    stop_processes(left)


def _bare_flower_run(app: Path, config: dict, shards: Path, work: Path) -> tuple[float, float, float, float]:
    """One ``flwr run . --stream`` of the bare Flower App on the CLI's local simulation SuperLink, which starts with
    it: (time to round 1, median time per round of rounds 2..R, time to round 1, in seconds; peak memory in MB)."""
    run_config = " ".join(f"{key}={value}" for key, value in _app_settings(config).items()) + f' shards="{shards}"'
    federation = (
        f"num-supernodes={config['clients']} client-resources-num-cpus=1 init-args-num-cpus={config['total_cpus']}"
    )
    home = Path(tempfile.mkdtemp(prefix="flwr-home-", dir=work))
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "RAY_ADDRESS": "local",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    command = [flwr_cli(), "run", ".", "--stream", "--run-config", run_config]
    start = time.time()
    try:
        lines, peak_mb = _timed_lines([*command, "--federation-config", federation], app, env)
    finally:
        _stop_local_superlink(home)
    ends, first_seen = _rounds_printed(lines)
    return _round_times(SIMULATION, ends, start, config["training"]["rounds"], peak_mb, first_seen)


def _before_checkout(work: Path) -> Path:
    """FLTest at :data:`BEFORE_REVISION`, checked out into a git worktree in ``work`` (removed by :func:`_drop_checkout`)."""
    folder = work / "fltest-before"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), BEFORE_REVISION],
        check=True,
        capture_output=True,
    )
    return folder


def _drop_checkout(folder: Path) -> None:
    """Remove the worktree :func:`_before_checkout` made."""
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=True, capture_output=True
    )


def simulation(config: dict, repeat: int, work: Path) -> tuple[Times, Times]:
    """The bare side and ``fltest run`` of ``config`` on the same shard set, alternating ``repeat`` times in
    ``work``: each side's (time to round 1, time per round, ..., peak memory) list. The bare side is the mode's bare
    app, or FLTest before the move to ``flwr run`` (``flower-before``)."""
    mode = config["runs"][0]["name"]
    shards, _ = prepare_shards(ExperimentConfig.model_validate(config))  # FLTest's, so both read the same
    env = {**os.environ, "FLTEST_RAY_ADDRESS": ""}
    before = _before_checkout(work) if mode == BEFORE else None
    app = _bare_app(work / "app", config) if mode == SIMULATION else None
    bare, ours = [], []
    try:
        for _ in range(repeat):
            if before is not None:
                bare.append(_fltest(config, work, FLTEST_RUN, {**env, "PYTHONPATH": str(before)}))
            elif app is not None:
                bare.append(_bare_flower_run(app, config, shards.root, work))
            else:
                bare.append(_bare(mode, config, shards.root, work))
            ours.append(_fltest(config, work, FLTEST_RUN, env))
    finally:
        if before is not None:
            _drop_checkout(before)
    return bare, ours


def _flower(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    """``fltest-flower <args>`` on the bench's project (``env``); its output."""
    return _run([*FLOWER, *args], cwd, env)[0]


def _bare_app(folder: Path, config: dict) -> Path:
    """The bare Flower App in ``folder``: bench/bare/flower_app with logreg.py, shard.py and the test split (``test.json``)
    of FLTest's shard set for ``config`` in its package."""
    shutil.copytree(BARE / "flower_app", folder)
    for module in ("logreg.py", "shard.py"):
        shutil.copyfile(BARE / module, folder / APP_PACKAGE / module)
    shards, _ = prepare_shards(ExperimentConfig.model_validate(config))
    x, y = saved_arrays(shards.test_folder, shards.scale)
    test = {"x": x.reshape(len(y), -1).tolist(), "y": y.tolist(), "classes": shards.num_classes}
    (folder / APP_PACKAGE / "test.json").write_text(json.dumps(test))
    return folder


def _bare_deployment(app: Path, config: dict, env: dict[str, str]) -> tuple[float, float, float, float]:
    """One ``fltest-flower flwr run <app> fltest --stream`` of the bare Flower App: (time to round 1, median time per
    round of rounds 2..R, time to round 1, in seconds, from the times its ServerApp's round lines reached the host;
    the host side's peak memory in MB)."""
    run_config = " ".join(f"{key}={value}" for key, value in _app_settings(config).items())
    start = time.time()
    lines, peak_mb = _timed_lines(
        [*FLOWER, "flwr", "run", ".", "fltest", "--stream", "--run-config", run_config], app, env
    )
    ends, first_seen = _rounds_printed(lines)
    return _round_times(DEPLOYMENT, ends, start, config["training"]["rounds"], peak_mb, first_seen)


def flower_deployment(config: dict, repeat: int, root: Path) -> tuple[Times, Times]:
    """FLTest's run of ``config`` and the bare Flower App on ``config["clients"]`` SuperNodes of the bench's own
    emulation (its files in ``root``), alternating ``repeat`` times: each side's (time to round 1, time per round)
    list. The project is removed at the end."""
    env = {
        **os.environ,
        "FLTEST_IMAGE": IMAGE,
        "FLOWER_SUPERNODES": str(config["clients"]),
        "FLOWER_TLS_DIR": str(root / "tls"),
        "FLOWER_KEYS_DIR": str(root / "keys"),
        "FLOWER_DATA_DIR": str(root / "data"),
        "COMPOSE_PROJECT_NAME": PROJECT,
        "FLOWER_GENERATED_DIR": str(root / "generated"),
    }
    bare, ours = [], []
    try:
        ca = _flower(env, "tls").strip().rsplit(": ", 1)[1]  # root certificate for SuperNodes and the flwr CLI: <file>
        config["runs"][0]["options"] = {"mode": "deployment", "superlink": SUPERLINK_ADDRESS, "root_certificates": ca}
        path = root / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        _flower(env, "keys")
        _flower(env, "prepare", str(path))
        _flower(env, "up")
        app = _bare_app(root / "app", config)
        for _ in range(repeat):
            bare.append(_bare_deployment(app, config, env))
            ours.append(_fltest(config, root, FLOWER + ["run"], env))
    finally:
        _flower(env, "down")
    return bare, ours


def _import_s(module: str) -> float:
    """Seconds for a fresh interpreter to ``import module`` (its whole process)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
    return time.perf_counter() - start


def clientapp_import(repeat: int) -> None:
    """Print the medians of importing ``flwr.clientapp`` and FLTest's ClientApp module, alternating."""
    module = CLIENT_COMPONENT.split(":")[0]
    times: dict[str, list[float]] = {"flwr.clientapp": [], module: []}
    for _ in range(repeat):
        for name, found in times.items():
            found.append(_import_s(name))
    bare, ours = (statistics.median(t) for t in times.values())
    print(
        f"clientapp import (median of {repeat}): flwr.clientapp {bare:.2f} s, {module} {ours:.2f} s, "
        f"difference {ours - bare:.2f} s"
    )


def _print_row(mode: str, clients: int, bare: Times, ours: Times) -> None:
    """One table line: the medians of each side's times and peaks (:data:`Times`), and the ratios to the bare side's."""
    b1, bs, _, bm = (statistics.median(t[i] for t in bare) for i in (0, 1, 2, 3))
    f1, fs, r1, fm = (statistics.median(t[i] for t in ours) for i in (0, 1, 2, 3))
    print(
        f"{mode:<18} {clients:>7} {bs:>12.3f} {fs:>14.3f} {fs / bs:>6.2f} {b1:>14.2f} {f1:>16.2f} {f1 / b1:>6.2f}"
        f" {r1:>20.2f} {r1 / b1:>6.2f} {bm:>12.0f} {fm:>14.0f}",
        flush=True,
    )


def main() -> None:
    """Run FLTest and the bare apps alternately and print the medians and ratios for each mode and client count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 120])
    parser.add_argument("--supernodes", type=int, nargs="+", default=[2, 4], help="flower-deployment's clients")
    parser.add_argument("--rounds", type=int, default=5, help="at least 2 (round 1 is reported apart)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each side; medians")
    parser.add_argument("--modes", nargs="+", choices=[*MODES, DEPLOYMENT], default=list(MODES))
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="the config's total_cpus")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2")
    clientapp_import(max(args.repeat, 5))
    print(
        f"{'mode':<18} {'clients':>7} {'bare s/round':>12} {'fltest s/round':>14} {'ratio':>6} "
        f"{'bare round 1 s':>14} {'fltest round 1 s':>16} {'ratio':>6} {'fltest run→round 1 s':>20} {'ratio':>6} "
        f"{'bare peak MB':>12} {'fltest peak MB':>14}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            for clients in args.supernodes if mode == DEPLOYMENT else args.clients:
                config = _config(mode, clients, args.rounds, args.cpus)
                work = Path(tmp) / f"{mode}-{clients}"
                work.mkdir()
                sides = flower_deployment if mode == DEPLOYMENT else simulation
                _print_row(mode, clients, *sides(config, args.repeat, work))


if __name__ == "__main__":
    main()
