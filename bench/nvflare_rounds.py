"""Benchmark: time per round of the nvflare backend against the reference and flwr backends, on one machine.

One experiment (10 clients by default) with three runs, reference, flwr (a private
Ray) and nvflare (the NVFlare simulator), each timed by FLTest's own recorder. A
round's time is the time between two recorded rounds, so it holds the framework's
whole round trip (task out, local training, replies, aggregation, evaluation). Round
1 is shown on its own (it also holds the start of the clients); the steady-state
figure is the mean of rounds 2..R, and the ratios compare it side by side.
Run: ``python bench/nvflare_rounds.py [--clients 10] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from fltest.config.schema import ExperimentConfig
from fltest.results.files import read_jsonl
from fltest.runner import run_experiment

BACKENDS = ("reference", "flwr", "nvflare")


def _config(clients: int, rounds: int, cpus: int) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": f"bench-nvflare-{clients}",
            "dataset": {"source": "digits", "scale": 16.0},
            "partition": {"method": "iid"},
            "clients": clients,
            "training": {"rounds": rounds, "local_epochs": 1, "learning_rate": 0.5, "round_timeout_s": 600},
            "total_cpus": cpus,
            "runs": [{"name": b, "framework": b} for b in BACKENDS],
        }
    )


def _timings(run_dir: Path) -> dict[str, float]:
    """Setup, round 1, mean of later rounds and wall time of one run, in seconds."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed", summary["error"]
    rounds = [r["round_s"] for r in read_jsonl(run_dir / "metrics.jsonl")[1:]]
    timings = json.loads((run_dir / "timings.json").read_text())
    return {
        "setup": timings.get("setup_s", 0.0),
        "first": rounds[0],
        "steady": float(np.mean(rounds[1:])),
        "wall": summary["wall_s"],
    }


def main() -> None:
    """Run the three backends and print their per-round times and ratios side by side."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5, help="at least 2 (round 1 is reported apart)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="the config's total_cpus")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2")
    logging.basicConfig(level=logging.WARNING)
    os.environ.pop("FLTEST_RAY_ADDRESS", None)  # one machine: flwr on a private Ray
    config = _config(args.clients, args.rounds, args.cpus)
    with tempfile.TemporaryDirectory() as tmp:
        run_experiment(config, Path(tmp))
        times = {b: _timings(Path(tmp) / config.name / b) for b in BACKENDS}
    print(f"{args.clients} clients, {args.rounds} rounds, one machine (total_cpus {args.cpus})")
    print(
        f"{'backend':<10} {'setup s':>8} {'round 1 s':>10} {f's/round 2..{args.rounds}':>13} {'wall s':>8} "
        f"{'x reference':>12} {'x flwr':>8}"
    )
    for backend, t in times.items():
        print(
            f"{backend:<10} {t['setup']:>8.2f} {t['first']:>10.2f} {t['steady']:>13.3f} {t['wall']:>8.2f} "
            f"{t['steady'] / times['reference']['steady']:>12.1f} {t['steady'] / times['flwr']['steady']:>8.2f}"
        )


if __name__ == "__main__":
    main()
