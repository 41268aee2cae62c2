"""Joining an existing Ray cluster (``FLTEST_RAY_ADDRESS``) and placing shards in its object store."""

from __future__ import annotations

import socket

import datasets
import ray
from datasets.table import InMemoryTable

from fltest.backends.flwr.ray_errors import remember_node_names
from fltest.backends.pythonpath import driver_pythonpath
from fltest.backends.ray_address import ADDRESS_VARIABLE
from fltest.data.shards import ShardSet, dataset_arrays
from fltest.errors import InputError, RunFailed

CONNECT_TIMEOUT_S = 5.0


def _check_reachable(address: str) -> None:
    """Fail in bounded time, with one line, when nothing listens at ``host:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"{ADDRESS_VARIABLE}={address}: expected <host>:<port>")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise RunFailed(f"{ADDRESS_VARIABLE}={address}: no Ray head answers ({exc})") from None


def join_cluster(address: str) -> None:
    """Connect this driver to the cluster, shipping the driver's ``sys.path`` to every worker."""
    _check_reachable(address)
    runtime_env = {"env_vars": {"PYTHONPATH": driver_pythonpath()}}
    try:
        ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING", log_to_driver=True)
    except Exception as exc:  # Ray raises RuntimeError, ConnectionError, ... for a cluster it cannot use
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunFailed(f"{ADDRESS_VARIABLE}={address}: cannot join the Ray cluster: {first_line}") from None
    remember_node_names()  # error lines name a lost node by its container or host name


def put_shards(shards: ShardSet) -> dict[int, ray.ObjectRef]:
    """Put every client's in-memory shard into the object store once, as its Arrow table; returns the references.

    The table alone: a pickled ``Dataset`` carries its table twice (measured: 318 KB against 158 KB).
    """
    return {pid: ray.put(shards.client_dataset(pid).data.table) for pid in range(shards.num_clients)}


class ObjectStoreShards:
    """A shard source that fetches only the asking client's shard from Ray's object store."""

    def __init__(self, refs: dict[int, ray.ObjectRef], scale: float) -> None:
        """Hold the references (small when pickled), not the data; ``scale`` divides the features (the shard set's)."""
        self.refs = refs
        self.scale = scale

    def __call__(self, partition_id: int):
        """Client ``partition_id``'s features and labels."""
        table = InMemoryTable(ray.get(self.refs[partition_id]))
        return dataset_arrays(datasets.Dataset(table, fingerprint=f"fltest-shard-{partition_id}"), self.scale)  # no hash of the data


class LocalCacheShards:
    """A shard source that memory-maps the asking client's shard from this machine's cache."""

    def __init__(self, shards: ShardSet) -> None:
        """Hold the shard set (paths and sizes, no data)."""
        self.shards = shards

    def __call__(self, partition_id: int):
        """Client ``partition_id``'s features and labels."""
        return self.shards.client_arrays(partition_id)
