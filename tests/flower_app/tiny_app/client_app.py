"""The ClientApp: reads its partition id from ``partition.json`` in its node config's ``data-path``, adds (id + 1) to the model."""

from __future__ import annotations

import json
import time
from pathlib import Path

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round: the model plus (partition id + 1), and one line appended to ``client-<id>.txt`` in the working folder."""
    meta = json.loads((Path(str(context.node_config["data-path"])) / "partition.json").read_text())
    partition_id = int(meta["partition-id"])
    time.sleep(float(context.run_config["train-seconds"]))
    arrays = [array + (partition_id + 1) for array in msg.content["arrays"].to_numpy_ndarrays()]
    with open(f"client-{partition_id}.txt", "a") as log:  # relative: the ClientApp's working folder
        log.write(f"round {msg.content['config']['server-round']}\n")
    content = RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 1})})
    return Message(content=content, reply_to=msg)
