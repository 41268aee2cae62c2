"""The ServerApp: FedAvg over every SuperNode for ``num-server-rounds`` rounds, then ``final_model.npz`` in its working folder."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

MODEL_FILE = "final_model.npz"  # relative: the ServerApp's working folder, as most Flower examples write theirs

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train a 3-value model from zeros; each round every ClientApp adds (its partition id + 1) and FedAvg averages them."""
    rounds = int(context.run_config["num-server-rounds"])
    nodes = len(list(grid.get_node_ids()))
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=nodes, min_available_nodes=nodes)
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord([np.zeros(3)]),
        num_rounds=rounds,
        timeout=float(context.run_config["round-timeout"]),
    )
    np.savez(MODEL_FILE, *result.arrays.to_numpy_ndarrays())
    print(f"tiny-app: {rounds} rounds on {nodes} SuperNodes, model saved to {MODEL_FILE}")
