"""Benchmark: many CIFAR-shaped clients on every backend of one machine: time per round, peak memory, the model.

Makes a CIFAR-10-shaped set on disk (``--rows`` random 32x32x3 uint8 images, 10 classes; no download, as
bench/data_scale.py makes it), then runs each backend as a user does, ``fltest run config.yaml`` from a
folder of its own, one process a backend, sampling the resident memory of that process and every process
it starts. The shards (Dirichlet, alpha 0.5) are made by the first run of each client count and cached in
the bench's own folder. For each client count and backend it prints the time to round 1 from the run's
start (the framework's start included), the median of the later rounds, the peak memory, how many clients
NVFlare's simulator ran at once (``options.threads`` or FLTest's pick from the machine), and the largest
difference of the last round's model from the reference's (0: bit for bit).
Run: ``python bench/many_clients.py [--clients 120 500] [--rounds 3] [--backends reference flwr nvflare]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from bare_apps import PeakMemory
from data_scale import disk_dataset, make_source

from fltest.params import load_params

BACKENDS = ("reference", "flwr", "nvflare")
FLTEST = str(Path(sys.executable).parent / "fltest")


def _config(source: Path, clients: int, rounds: int, backend: str) -> dict:
    return {
        "name": f"many-{clients}",
        "seed": 0,
        "clients": clients,
        **disk_dataset(source),
        "model": {"type": "logreg"},
        "training": {"rounds": rounds, "local_epochs": 1, "batch_size": 32, "learning_rate": 0.05},
        "total_cpus": 2,
        "output": {"save_round_models": True},
        "runs": [{"name": backend, "framework": backend}],
    }


def _run(folder: Path, config: dict, cache: Path) -> dict:
    """``fltest run config.yaml`` in ``folder``, its shards cached in ``cache``: its round times, peak memory,
    NVFlare's threads, last model."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [FLTEST, "run", "config.yaml"],
        cwd=folder,
        env={**os.environ, "HF_DATASETS_CACHE": str(cache)},  # the bench's shards never reach the user's cache
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    memory = PeakMemory(process.pid)
    output, _ = process.communicate()
    peak_mb = memory.stop()
    run_dir = folder / "results" / config["name"] / config["runs"][0]["name"]
    summary = json.loads((run_dir / "summary.json").read_text())
    if process.returncode != 0 or summary["status"] != "completed":
        raise RuntimeError(f"{run_dir.name}: exit {process.returncode}, {summary.get('error')}\n{output[-3000:]}")
    rounds = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    later = [r["round_s"] for r in rounds if r["round"] >= 2]
    last = max(run_dir.glob("models/round-*.npz"))
    return {
        "first": next(r["elapsed_s"] for r in rounds if r["round"] == 1),  # from the run's start
        "later": statistics.median(later) if later else float("nan"),
        "peak_mb": peak_mb,
        "threads": summary.get("nvflare_threads", "-"),
        "model": load_params(last),
    }


def main() -> None:
    """Make the set, then run every backend at every client count and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[120, 500])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    args = parser.parse_args()
    backends = ["reference", *[b for b in args.backends if b != "reference"]]  # the model every other is held to
    with tempfile.TemporaryDirectory(prefix="fltest-bench-many-") as tmp:
        work = Path(tmp)
        start = time.monotonic()
        make_source(work / "source", args.rows)
        print(f"# {args.rows} CIFAR-shaped rows written in {time.monotonic() - start:.1f} s", flush=True)
        print("clients  backend    threads  to round 1 s  later rounds s  peak MB  |dw| vs reference", flush=True)
        for clients in args.clients:
            results = {}
            for backend in backends:
                config = _config(work / "source", clients, args.rounds, backend)
                results[backend] = found = _run(work / f"{clients}-{backend}", config, work / "cache")
                difference = max(
                    float(np.max(np.abs(a - b))) for a, b in zip(found["model"], results["reference"]["model"])
                )
                print(
                    f"{clients:7d}  {backend:9s}  {found['threads']!s:>7}  {found['first']:12.2f}"
                    f"  {found['later']:14.2f}  {found['peak_mb']:7.0f}  {difference:g}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
