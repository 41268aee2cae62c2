"""Benchmark: the reference backend's time per round against the same local training in bare numpy.

Both sides run the same clients with the same local work in this process, side by
side (the bare side trains every client of round r from the reference's saved
global model of round r-1, with the same seeds); the ratio is the cost of the FL loop (selection, hooks, aggregation,
evaluation, recording). Run: ``python bench/reference_overhead.py``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import prepare_shards
from fltest.fedavg import client_seed
from fltest.model import load_model
from fltest.params import load_params
from fltest.runner import run_experiment


def _config(clients: int, rounds: int) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": f"bench-{clients}",
            "seed": 0,
            "dataset": {"source": "digits", "scale": 16.0},
            "partition": {"method": "iid"},
            "clients": clients,
            "training": {"rounds": rounds, "local_epochs": 1, "batch_size": 16, "learning_rate": 0.5},
            "runs": [{"name": "reference", "framework": "reference"}],
            "output": {"save_round_models": True},
        }
    )


def _reference_per_round(config: ExperimentConfig, results: Path) -> float:
    """Mean seconds per round of the reference backend (setup excluded)."""
    comparison = run_experiment(config, results)
    assert comparison["runs"][0]["status"] == "completed"
    run_dir = results / config.name / "reference"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    return float(np.mean([r["round_s"] for r in records]))


def _bare_numpy_per_round(config: ExperimentConfig, results: Path) -> float:
    """Seconds per round of the same local training alone: every client from the same global model."""
    shards, _ = prepare_shards(config)
    data = [shards.client_arrays(i) for i in range(shards.num_clients)]
    models = sorted((results / config.name / "reference" / "models").iterdir())
    model = load_model(config.model)
    start = time.perf_counter()
    for server_round, saved in enumerate(models[:-1], start=1):
        params = load_params(saved)
        for pid, (x, y) in enumerate(data):
            model.train(params, x, y, config.training, client_seed(config.seed, server_round, pid))
    return (time.perf_counter() - start) / config.training.rounds


def main() -> None:
    """Print a table of per-round times and the overhead ratio for each client count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeat", type=int, default=3, help="best of this many measurements")
    args = parser.parse_args()
    print(f"{'clients':>7}  {'numpy s/round':>13}  {'reference s/round':>17}  {'overhead ratio':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for clients in args.clients:
            config = _config(clients, args.rounds)
            reference = min(_reference_per_round(config, Path(tmp)) for _ in range(args.repeat))
            bare = min(_bare_numpy_per_round(config, Path(tmp)) for _ in range(args.repeat))
            print(f"{clients:>7}  {bare:>13.4f}  {reference:>17.4f}  {reference / bare:>14.2f}")


if __name__ == "__main__":
    main()
