"""The ClientApp's reader of a SuperNode's own data folder (:mod:`fltest.backends.flwr_deployment.node_data` writes it).

A node folder holds ``partition.json`` (partition id, number of partitions, the shard set's key,
the features' scale) and ``shard/`` (the shard as ``save_to_disk`` wrote it). The SuperNode mounts it
read-only and names it in its node config as ``data-path``. The shard is read with pyarrow
(:mod:`fltest.data.saved_table`): the ClientApp's process is started once per message.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fltest.data.saved_table import saved_arrays

META_FILE = "partition.json"
SHARD_DIR = "shard"
DATA_PATH_KEY = "data-path"  # the node-config key naming the folder inside the SuperNode


class NodeShard:
    """The shard source of a SuperNode: its own exported folder, checked against the run."""

    def __init__(self, folder: Path, shards_key: str, num_partitions: int) -> None:
        """Read the folder's ``partition.json``; the data is loaded when a round asks for it."""
        self.folder = folder
        meta_path = folder / META_FILE
        if not meta_path.is_file():
            raise ValueError(f"{DATA_PATH_KEY}={folder}: no {META_FILE} (export this node's partition first)")
        self.meta = json.loads(meta_path.read_text())
        if self.meta["shards-key"] != shards_key or self.meta["num-partitions"] != num_partitions:
            raise ValueError(
                f"{meta_path}: partition of shard set {self.meta['shards-key']} ({self.meta['num-partitions']} clients),"
                f" the run needs {shards_key} ({num_partitions} clients): export it again"
            )

    def __call__(self, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The node's features and labels; refuses a partition id the folder does not hold."""
        if partition_id != self.meta["partition-id"]:
            raise ValueError(
                f"{self.folder}: holds partition {self.meta['partition-id']}, node config says {partition_id}"
            )
        return saved_arrays(self.folder / SHARD_DIR, self.meta["scale"])
