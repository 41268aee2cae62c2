"""The ServerApp: FedAvg over every SuperNode; the global model is evaluated on the test split each round.

It runs in the SuperLink's container, so the test split travels in the App (``test.json``, which the
bench writes into this package: a FAB carries no ``.npz``). Each round's end is printed as one JSON line with
the time it ended (``t``), which ``flwr run --stream`` shows on the host: Flower's log reaches it in batches
(uploaded every 0.2 s, streamed every 0.5 s), so the bench times a round from ``t`` and round 1's arrival
as it arrives (as FLTest's).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from bare_flower_app import logreg

TEST_FILE = Path(__file__).with_name("test.json")  # {"x": rows of features, "y": labels, "classes": n}

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """``num-server-rounds`` rounds of FedAvg on all ``num-supernodes`` SuperNodes, each round's end printed."""
    test = json.loads(TEST_FILE.read_text())
    x_test, y_test = np.asarray(test["x"], dtype=np.float64), np.asarray(test["y"], dtype=np.int64)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        loss, accuracy = logreg.evaluate(arrays.to_numpy_ndarrays(), x_test, y_test)
        print(json.dumps({"round": server_round, "accuracy": accuracy, "t": time.time()}), flush=True)
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    nodes = int(context.run_config["num-supernodes"])
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=nodes, min_available_nodes=nodes)
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(logreg.init(x_test.shape[1], int(test["classes"]))),
        num_rounds=int(context.run_config["num-server-rounds"]),
        evaluate_fn=evaluate,
        timeout=float(context.run_config["round-timeout"]),
    )
