"""Benchmark: time per round of the PyTorch CNN example on reference, flwr and nvflare, and each framework's overhead.

One ``fltest run`` of ``examples/digits_cnn.yaml`` (the ``torch`` extra; clients, rounds and CPUs
as given) runs the three frameworks side by side, each timed by FLTest's own recorder (a round
is the time between two recorded rounds: tasks out, local training, replies, aggregation, the
global model's test). Before it, the same local training alone, in this process: every client
of round r trained from the reference's global model of round r-1 (from a reference-only run)
with the run's seeds, timed client by client.

The share outside local training (the framework's overhead) is ``1 - training / round``, where
``training`` is that bare local training of one round divided by how many clients the framework
trains at once here: 1 for the reference (sequential), ``min(total_cpus, clients)`` for Flower's
Ray actors and NVFlare's client processes. Round 1 (which also starts the clients) is left out;
each round's bare training is the fastest of three timings.
Run: ``python bench/torch_rounds.py [--clients 10] [--rounds 4] [--cpus N] [--local-epochs E]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from fltest.config.loader import load_config
from fltest.config.schema import ExperimentConfig
from fltest.fedavg import client_update
from fltest.hooks import load_hooks
from fltest.params import load_params
from fltest.results.files import read_jsonl
from fltest.runner import prepare, run_experiment

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits_cnn.yaml"
REPEATS = 3  # the bare training of each round is timed this many times, the fastest kept (the least disturbed)
BACKENDS = {"reference": "reference", "flower": "flwr", "nvflare": "nvflare"}  # the example's run names


def _config(clients: int, rounds: int, cpus: int, local_epochs: int | None) -> ExperimentConfig:
    """The shipped CNN example with ``clients``, ``rounds``, ``cpus`` (and ``local_epochs``), every round's global model saved."""
    example = load_config(EXAMPLE)  # puts examples/ on sys.path: the model and hooks modules import
    data = example.model_dump(mode="json")
    data.update(name=f"bench-torch-{clients}", clients=clients, total_cpus=cpus, output={"save_round_models": True})
    data["training"].update(rounds=rounds, **({"local_epochs": local_epochs} if local_epochs else {}))
    return ExperimentConfig.model_validate(data)


def _seconds_per_round(run_dir: Path) -> float:
    """Mean recorded seconds of rounds 2..R."""
    return float(np.mean([r["round_s"] for r in read_jsonl(run_dir / "metrics.jsonl")[2:]]))


def _bare_training_per_round(config: ExperimentConfig, reference: Path) -> float:
    """Mean seconds of rounds 2..R's local training alone, every client in turn, as the run trained them (fastest of :data:`REPEATS`)."""
    shards = prepare(config)
    data = [shards.client_arrays(i) for i in range(shards.num_clients)]
    hooks = load_hooks(config.hooks)
    rounds = read_jsonl(reference / "metrics.jsonl")
    times = []
    for server_round in range(2, config.training.rounds + 1):
        params = load_params(reference / "models" / f"round-{server_round - 1:04d}.npz")
        repeats = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for pid in rounds[server_round]["clients"]:
                client_update(config, hooks, pid, server_round, params, *data[pid])
            repeats.append(time.perf_counter() - start)
        times.append(min(repeats))
    return float(np.mean(times))


def main() -> None:
    """Run the example on the three frameworks, then its training alone; print times and overhead shares."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4, help="at least 2 (round 1 is left out)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="the config's total_cpus")
    parser.add_argument("--local-epochs", type=int, help="more local work a round (default: the example's)")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2")
    logging.basicConfig(level=logging.WARNING)
    os.environ.pop("FLTEST_RAY_ADDRESS", None)  # one machine: flwr on a private Ray
    config = _config(args.clients, args.rounds, args.cpus, args.local_epochs)
    reference_only = config.model_copy(update={"runs": [run for run in config.runs if run.framework == "reference"]})
    with tempfile.TemporaryDirectory() as tmp:
        # The bare training first, before any framework started a process that could still be busy.
        run_experiment(reference_only, Path(tmp) / "models")
        training = _bare_training_per_round(config, Path(tmp) / "models" / config.name / "reference")
        comparison = run_experiment(config, Path(tmp) / "runs")
        assert all(run["status"] == "completed" for run in comparison["runs"]), comparison
        experiment = Path(tmp) / "runs" / config.name
        per_round = {run: _seconds_per_round(experiment / run) for run in BACKENDS}
        worst = max(run.get("max_param_diff_vs_reference") or 0.0 for run in comparison["runs"])
    at_once = min(args.cpus, args.clients)
    print(
        f"CNN example (examples/digits_cnn.py): {args.clients} clients, {config.training.local_epochs} local epochs, "
        f"rounds 2..{args.rounds}, total_cpus {args.cpus}, max |dw| vs reference {worst:g}"
    )
    print(f"local training alone: {training:.3f} s a round (every client in turn, one thread)")
    print(
        f"{'run':<10} {'s/round':>8} {'x reference':>12} {'clients at once':>16} {'training s':>11} {'outside training':>17}"
    )
    for run, framework in BACKENDS.items():
        parallel = 1 if framework == "reference" else at_once
        share = 1.0 - (training / parallel) / per_round[run]
        print(
            f"{run:<10} {per_round[run]:>8.3f} {per_round[run] / per_round['reference']:>12.2f} {parallel:>16} "
            f"{training / parallel:>11.3f} {share:>16.0%}"
        )


if __name__ == "__main__":
    main()
