"""A minimal Flower 1.42 simulation, as Flower's docs teach it (no FLTest import): FedAvg of softmax regression.

A ServerApp runs ``FedAvg.start`` with an ``evaluate_fn`` on the test split; the ClientApp reads its
partition (``context.node_config["partition-id"]``) and trains with local SGD. Each round's end is
appended to ``--out`` as a JSON line with its wall-clock time, for bench/bare_apps.py.
Run: ``python bench/bare/flower_simulation.py --shards <shard set> --clients 10 --rounds 5 --out rounds.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import logreg
import shard
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

SETTINGS = "BARE_SETTINGS"  # the run's settings as JSON, in the environment (Ray's workers inherit it)
client_app = ClientApp()
server_app = ServerApp()


def _settings() -> dict:
    return json.loads(os.environ[SETTINGS])


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Train on this client's partition from the global model."""
    s = _settings()
    partition_id = int(context.node_config["partition-id"])
    x, y = shard.client(Path(s["shards"]), partition_id)
    params, loss = logreg.train(
        msg.content["arrays"].to_numpy_ndarrays(),
        x,
        y,
        s["epochs"],
        s["batch_size"],
        s["lr"],
        seed=int(msg.content["config"]["server-round"]) * 100_003 + partition_id,
    )
    metrics = MetricRecord({"num-examples": len(y), "train_loss": loss})
    return Message(RecordDict({"arrays": ArrayRecord(params), "metrics": metrics}), reply_to=msg)


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """FedAvg over every client each round; the global model is evaluated on the test split and timed."""
    s = _settings()
    root = Path(s["shards"])
    x_test, y_test = shard.test(root)
    out = Path(s["out"])

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        loss, accuracy = logreg.evaluate(arrays.to_numpy_ndarrays(), x_test, y_test)
        with out.open("a") as f:
            f.write(json.dumps({"round": server_round, "t": time.time(), "accuracy": accuracy}) + "\n")
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0)
    initial = ArrayRecord(logreg.init(x_test.shape[1], shard.num_classes(root)))
    strategy.start(grid=grid, initial_arrays=initial, num_rounds=s["rounds"], evaluate_fn=evaluate, timeout=600)


def cli() -> None:
    """Run the simulation on a private Ray with ``--cpus`` CPUs, one per client."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=Path, required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    os.environ[SETTINGS] = json.dumps(
        {
            "shards": str(args.shards),
            "rounds": args.rounds,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "out": str(args.out),
        }
    )
    backend_config = {"client_resources": {"num_cpus": 1}, "init_args": {"address": "local", "num_cpus": args.cpus}}
    run_simulation(server_app, client_app, num_supernodes=args.clients, backend_config=backend_config)


if __name__ == "__main__":
    cli()
