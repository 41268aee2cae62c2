"""One client's shard exported as a SuperNode's own data folder (the driver's side).

A node folder holds ``partition.json`` (partition id, number of partitions, the shard set's
key, the features' scale) and ``shard/`` (the shard as ``save_to_disk`` wrote it). The SuperNode mounts it
read-only and names it in its node config as ``data-path``; the ClientApp reads it with
:class:`fltest.backends.flwr_deployment.node_shard.NodeShard`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fltest.backends.flwr_deployment.node_shard import META_FILE, SHARD_DIR
from fltest.data.shard_set import ShardSet

EXPORT_STORAGE = "mmap"  # partitions are exported from the memory-mapped shard set


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
    shutil.copytree(shards.client_folder(partition_id), staging / SHARD_DIR)
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
