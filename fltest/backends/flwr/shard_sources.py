"""Where a simulated Flower client finds its shard, named in the run config so that the App's ClientApp can find it.

The driver prepares the shards; the ClientApps run as Ray actors started by Flower's simulation
runtime (another process, on this machine or on a cluster's nodes). On one machine a client
memory-maps its shard from the driver's cache (:class:`LocalCacheShards`). On a cluster the driver
puts each shard into the object store once and a named actor holds the references
(:mod:`fltest.backends.flwr.cluster`); a client asks it for its own and fetches only that
(:class:`ObjectStoreShards`). A source is small when pickled: Flower pickles the ClientApp with
every message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fltest.data.saved_table import saved_arrays
from fltest.data.shard_set import ShardSet, client_folder

ShardSource = Callable[[int], tuple[np.ndarray, np.ndarray]]
HOLDER_NAMESPACE = "fltest"  # the Ray namespace of the actors holding a run's shard references


class LocalCacheShards:
    """A shard source that memory-maps the asking client's shard from this machine's cache at ``root``."""

    def __init__(self, root: Path, scale: float) -> None:
        """Read from the shard set at ``root``; ``scale`` divides the features (the shard set's)."""
        self.root = root
        self.scale = scale

    def __call__(self, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``partition_id``'s features and labels."""
        return saved_arrays(client_folder(self.root, partition_id), self.scale)


class ObjectStoreShards:
    """A shard source that fetches only the asking client's shard from Ray's object store, through the named
    actor ``holder`` that keeps the references."""

    def __init__(self, holder: str, scale: float) -> None:
        """Ask the actor named ``holder`` (in :data:`HOLDER_NAMESPACE`); ``scale`` divides the features."""
        self.holder = holder
        self.scale = scale

    def __call__(self, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``partition_id``'s features and labels."""
        import datasets
        import ray
        from datasets.table import InMemoryTable

        from fltest.data.shards import dataset_arrays

        holder = ray.get_actor(self.holder, namespace=HOLDER_NAMESPACE)
        [reference] = ray.get(holder.shard.remote(partition_id))
        table = InMemoryTable(ray.get(reference))
        return dataset_arrays(
            datasets.Dataset(table, fingerprint=f"fltest-shard-{partition_id}"), self.scale
        )  # no hash of the data


def cache_spec(shards: ShardSet) -> str:
    """The run-config value naming the memory-mapped shard set ``shards`` on this machine."""
    return json.dumps({"cache": str(shards.root.resolve()), "scale": shards.scale})


def holder_spec(holder: str, scale: float) -> str:
    """The run-config value naming the actor ``holder`` that keeps a run's shards in the object store."""
    return json.dumps({"holder": holder, "scale": scale})


def shard_source(spec: str) -> ShardSource:
    """The shard source a run-config value of :func:`cache_spec` or :func:`holder_spec` names."""
    named = json.loads(spec)
    if "holder" in named:
        return ObjectStoreShards(named["holder"], float(named["scale"]))
    return LocalCacheShards(Path(named["cache"]), float(named["scale"]))
