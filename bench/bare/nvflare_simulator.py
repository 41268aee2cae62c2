"""A minimal NVFlare 2.9 job, as NVFlare's docs teach it (Recipe API; no FLTest import): FedAvg of softmax regression.

``NumpyFedAvgRecipe`` with the client script ``nvflare_client.py``, exported as a job folder and run with
``nvflare simulator``, one thread a client (the CLI, not ``SimEnv``: only the CLI takes more than 100
clients, ``--max_clients``). The client of partition 0 times each global model it receives (see that script).
Run: ``python bench/bare/nvflare_simulator.py --shards <shard set> --clients 10 --rounds 5 --out rounds.jsonl``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import logreg
import numpy as np
import shard
from nvflare.app_common.np.recipes.fedavg import NumpyFedAvgRecipe

HERE = Path(__file__).resolve().parent
MAX_CLIENTS = 100  # the simulator's default limit


def main() -> None:
    """Build the job, export it and run it in NVFlare's simulator, both in a temporary folder."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=Path, required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--cpus", type=int, default=1, help="unused: one thread a client, as FLTest runs it")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    x_test, _ = shard.test(args.shards)
    w, b = logreg.init(x_test.shape[1], shard.num_classes(args.shards))
    train_args = (
        f"--shards {args.shards.resolve()} --epochs {args.epochs} --batch-size {args.batch_size} --lr {args.lr}"
        f" --out {args.out.resolve()}"
    )
    recipe = NumpyFedAvgRecipe(
        name="bare-fedavg",
        model=np.vstack([w, b[None, :]]).tolist(),
        min_clients=args.clients,
        num_rounds=args.rounds + 1,  # the client times round k when it receives model k: one more delivers round R
        train_script=str(HERE / "nvflare_client.py"),
        train_args=train_args,
    )
    with tempfile.TemporaryDirectory() as tmp:
        recipe.export(f"{tmp}/jobs")
        clients = str(args.clients)
        simulator = [sys.executable, "-m", "nvflare.cli", "simulator", f"{tmp}/jobs/bare-fedavg", "-w", f"{tmp}/work"]
        subprocess.run(
            [*simulator, "-n", clients, "-t", clients, "-m", str(max(args.clients, MAX_CLIENTS))], check=True
        )


if __name__ == "__main__":
    main()
