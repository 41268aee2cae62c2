"""The ClientApp: local SGD from the global model on this client's partition.

On a SuperNode, the partition is its node config's ``data-path``: a folder holding ``partition.json``
(the features' scale) and ``shard/`` (a ``save_to_disk`` folder). In a simulation (``flwr run .`` on a
simulation SuperLink), Flower gives the client only its ``partition-id``, and the run config's
``shards`` names the prepared shard set it reads it from, as a ``flwr new`` App loads its partition.
Both are read with pyarrow and numpy (``shard.py``, which the bench copies into this package beside
``logreg.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bare_flower_app import logreg, shard

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train on this client's partition from the global model."""
    partition_id = int(context.node_config["partition-id"])
    if "data-path" in context.node_config:  # a SuperNode's own partition
        folder = Path(str(context.node_config["data-path"]))
        scale = float(json.loads((folder / "partition.json").read_text())["scale"])
        x, y = shard.load(folder / "shard", scale)
    else:  # a simulated client's
        x, y = shard.client(Path(str(context.run_config["shards"])), partition_id)
    params, loss = logreg.train(
        msg.content["arrays"].to_numpy_ndarrays(),
        x,
        y,
        int(context.run_config["local-epochs"]),
        int(context.run_config["batch-size"]),
        float(context.run_config["lr"]),
        seed=int(msg.content["config"]["server-round"]) * 100_003 + partition_id,
    )
    metrics = MetricRecord({"num-examples": len(y), "train_loss": loss})
    return Message(RecordDict({"arrays": ArrayRecord(params), "metrics": metrics}), reply_to=msg)
