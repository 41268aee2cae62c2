"""One client's shard as a SuperNode's own data folder, and the ClientApp's reader of it.

A node folder holds ``partition.json`` (partition id, number of partitions, the shard set's
key, the features' scale) and ``shard/`` (the shard as ``save_to_disk`` wrote it). The SuperNode mounts it
read-only and names it in its node config as ``data-path``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import numpy as np

from fltest.data.shards import ShardSet, dataset_arrays

META_FILE = "partition.json"
SHARD_DIR = "shard"
EXPORT_STORAGE = "mmap"  # partitions are exported from the memory-mapped shard set
DATA_PATH_KEY = "data-path"  # the node-config key naming the folder inside the SuperNode


def export_partition(shards: ShardSet, partition_id: int, folder: Path) -> Path:
    """Copy client ``partition_id``'s shard into ``folder`` (replacing an older export); returns it.

    ``shards`` is the memory-mapped set (``prepare_shards(config)``): its key is the one runs check.
    """
    if shards.storage != EXPORT_STORAGE:
        raise ValueError(f"export partitions from the {EXPORT_STORAGE} shard set, not {shards.storage!r}")
    if not 0 <= partition_id < shards.num_clients:
        raise ValueError(f"partition {partition_id}: the shard set has {shards.num_clients} clients")
    staging = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(shards.root / "clients" / f"{partition_id:05d}", staging / SHARD_DIR)
    meta = {
        "partition-id": partition_id,
        "num-partitions": shards.num_clients,
        "shards-key": shards.key,
        "scale": shards.scale,
    }
    (staging / META_FILE).write_text(json.dumps(meta))
    for path in [staging, *staging.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the container user reads it, read-only
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


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
        return dataset_arrays(datasets.load_from_disk(str(self.folder / SHARD_DIR)), self.meta["scale"])
