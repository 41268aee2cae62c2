"""The ClientApp: local SGD from the global model on this SuperNode's partition (its node config's ``data-path``).

The folder holds ``partition.json`` (the features' scale) and ``shard/`` (a ``save_to_disk`` folder),
read with pyarrow and numpy (``shard.py``, which the bench copies into this package beside ``logreg.py``).
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
    """Train on this SuperNode's partition from the global model."""
    folder = Path(str(context.node_config["data-path"]))
    partition_id = int(context.node_config["partition-id"])
    scale = float(json.loads((folder / "partition.json").read_text())["scale"])
    x, y = shard.load(folder / "shard", scale)
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
