"""Benchmark: FLTest's time per round and time to round 1 against a minimal app of each framework.

For each framework mode, a bare app written as that framework's docs teach (bench/bare/, importing
only the framework, numpy and pyarrow) trains softmax regression with the same local SGD on the same
partitions (FLTest's prepared shard set) as FLTest's run of the same config. Each side is one whole
process (``fltest run`` or ``python bench/bare/<app>.py``), alternating, ``--repeat`` times; the table
gives medians. Time per round is the median of rounds 2..R (each ends when the global model is
evaluated); time to round 1 runs from the process's start to the end of round 1.

Flower deployment starts one ``flwr-clientapp`` process per message, so FLTest's share of its round is
the import of the ClientApp module the App names: the ``clientapp import`` lines time it against
``import flwr.clientapp`` (whole interpreters, alternating, medians). A bare Flower App run on the
emulation's SuperNodes against FLTest's deployment run is not part of this bench yet (it needs an image
of the tree under test and a compose project of its own).
Run: ``python bench/bare_apps.py [--clients 10 120] [--rounds 5] [--repeat 3] [--modes flower-simulation nvflare]``.
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
from datetime import datetime
from pathlib import Path

import yaml

from fltest.backends.flwr_deployment.app_dir import CLIENT_COMPONENT
from fltest.config.schema import ExperimentConfig
from fltest.data.shards import prepare_shards

BARE = Path(__file__).resolve().parent / "bare"
MODES = {"flower-simulation": "flower_simulation.py", "nvflare": "nvflare_simulator.py"}
RUNS = {"flower-simulation": {"framework": "flwr"}, "nvflare": {"framework": "nvflare"}}
TRAINING = {"local_epochs": 1, "batch_size": 32, "learning_rate": 0.1, "round_timeout_s": 600}


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


def _fltest(config: dict, work: Path) -> tuple[float, float]:
    """One ``fltest run`` process: (time to round 1, median time per round of rounds 2..R), in seconds."""
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    results = work / "results"
    start = time.time()
    subprocess.run(
        [sys.executable, "-m", "fltest.cli", "run", str(path), "--results-dir", str(results)],
        check=True,
        cwd=work,
        capture_output=True,
        env={**os.environ, "FLTEST_RAY_ADDRESS": ""},
    )
    run_dir = results / config["name"] / config["runs"][0]["name"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed", summary.get("error")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    began = datetime.fromisoformat(summary["started_at"]).timestamp()
    first = began + next(r["elapsed_s"] for r in records if r["round"] == 1) - start
    return first, statistics.median(r["round_s"] for r in records if r["round"] >= 2)


def _bare(mode: str, config: dict, shards: Path, work: Path) -> tuple[float, float]:
    """One bare app's process: (time to round 1, median time per round of rounds 2..R), in seconds."""
    out = work / "rounds.jsonl"
    out.unlink(missing_ok=True)
    training = config["training"]
    start = time.time()
    subprocess.run(
        [
            sys.executable,
            str(BARE / MODES[mode]),
            *("--shards", str(shards), "--clients", str(config["clients"]), "--rounds", str(training["rounds"])),
            *("--epochs", str(training["local_epochs"]), "--batch-size", str(training["batch_size"])),
            *("--lr", str(training["learning_rate"]), "--cpus", str(config["total_cpus"]), "--out", str(out)),
        ],
        check=True,
        cwd=work,
        capture_output=True,
    )
    ends = {r["round"]: r["t"] for r in map(json.loads, out.read_text().splitlines())}
    rounds = sorted(r for r in ends if r >= 1)
    assert rounds == list(range(1, training["rounds"] + 1)), f"{mode}: rounds {rounds}"
    return ends[1] - start, statistics.median(ends[r] - ends[r - 1] for r in rounds[1:])


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


def main() -> None:
    """Run FLTest and the bare apps alternately and print the medians and ratios for each mode and client count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 120])
    parser.add_argument("--rounds", type=int, default=5, help="at least 2 (round 1 is reported apart)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each side; medians")
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=sorted(MODES))
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="the config's total_cpus")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2")
    clientapp_import(max(args.repeat, 5))
    print(
        f"{'mode':<18} {'clients':>7} {'bare s/round':>12} {'fltest s/round':>14} {'ratio':>6} "
        f"{'bare round 1 s':>14} {'fltest round 1 s':>16} {'ratio':>6}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            for clients in args.clients:
                config = _config(mode, clients, args.rounds, args.cpus)
                shards, _ = prepare_shards(ExperimentConfig.model_validate(config))  # FLTest's, so both read the same
                work = Path(tmp) / f"{mode}-{clients}"
                work.mkdir()
                bare, ours = [], []
                for _ in range(args.repeat):
                    bare.append(_bare(mode, config, shards.root, work))
                    ours.append(_fltest(config, work))
                b1, bs = (statistics.median(t[i] for t in bare) for i in (0, 1))
                f1, fs = (statistics.median(t[i] for t in ours) for i in (0, 1))
                print(
                    f"{mode:<18} {clients:>7} {bs:>12.3f} {fs:>14.3f} {fs / bs:>6.2f} "
                    f"{b1:>14.2f} {f1:>16.2f} {f1 / b1:>6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
