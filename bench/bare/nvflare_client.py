"""The client script of the bare NVFlare job (NVFlare's Client API, as its docs teach; no FLTest import).

Each site trains softmax regression on its partition (``site-<n>`` holds partition ``n - 1``); the
model travels as one array, the weights with the bias as their last row. ``site-1`` also evaluates
each global model it receives on the test split and appends the time to ``--out``: receiving the
model of round ``k`` (0-based) is the end of round ``k`` of the global model's history.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import logreg
import nvflare.client as flare
import shard
from nvflare.app_common.abstract.fl_model import FLModel


def main() -> None:
    """Receive the global model, train on this site's partition, send the model back, until the job ends."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    flare.init()
    site = flare.get_site_name()
    partition_id = int(site.split("-")[-1]) - 1
    x, y = shard.client(args.shards, partition_id)
    x_test, y_test = shard.test(args.shards) if partition_id == 0 else (None, None)
    while flare.is_running():
        received = flare.receive()
        model = received.params["numpy_key"]
        params = [model[:-1], model[-1]]
        if x_test is not None:
            _, accuracy = logreg.evaluate(params, x_test, y_test)
            with args.out.open("a") as f:
                f.write(json.dumps({"round": received.current_round, "t": time.time(), "accuracy": accuracy}) + "\n")
        seed = received.current_round * 100_003 + partition_id
        (w, b), loss = logreg.train(params, x, y, args.epochs, args.batch_size, args.lr, seed)
        flare.send(
            FLModel(
                params={"numpy_key": _packed(w, b)},
                metrics={"train_loss": loss},
                meta={"NUM_STEPS_CURRENT_ROUND": len(y)},
            )
        )


def _packed(w, b):
    """The weights with the bias as their last row: the one array NVFlare's numpy recipe carries."""
    import numpy as np

    return np.vstack([w, b[None, :]])


if __name__ == "__main__":
    main()
