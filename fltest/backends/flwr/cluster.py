"""Joining an existing Ray cluster (``FLTEST_RAY_ADDRESS``) and placing a run's shards in its object store."""

from __future__ import annotations

import os
import platform
import socket
import uuid
import warnings

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fltest.backends.flwr.ray_errors import ray_node_info, remember_node_names
from fltest.backends.flwr.ray_session import init_ray
from fltest.backends.flwr.shard_sources import HOLDER_NAMESPACE
from fltest.backends.ray_address import ADDRESS_VARIABLE
from fltest.data.shard_set import ShardSet
from fltest.errors import InputError, RunFailed

CONNECT_TIMEOUT_S = 5.0
# Each node Ray lists alive must run a task this soon before the run starts: twice the time Ray takes
# by default to declare a killed node dead, so that a slow but live node (a loaded host starting a
# worker process) is not failed.
NODE_ANSWER_TIMEOUT_S = 60.0


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


def _python_matches(cluster: str, driver: str, level: str) -> bool:
    """Whether two Python versions (``3.13.5``) agree at ``level`` (``minor``: 3.13; ``patch``: 3.13.5)."""
    parts = 2 if level == "minor" else 3
    return cluster.split(".")[:parts] == driver.split(".")[:parts]


def check_same_python(address: str) -> None:
    """Refuse, in one line naming both versions, a driver whose Python is not the cluster's as far as Ray checks it.

    Ray compares the two in ``ray.init`` (to the patch level by default, ``RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL``)
    and refuses with a message of several lines after it started connecting. The cluster's versions are in
    its GCS (the metadata Ray compares), read here first; a head that does not answer, or whose metadata
    cannot be read, is left to the run's own errors.
    """
    from ray._common.usage.usage_lib import get_cluster_metadata
    from ray._raylet import GcsClient

    try:
        _check_reachable(address)
        metadata = get_cluster_metadata(GcsClient(address=address))
        cluster_python = metadata["python_version"]
    except Exception:  # no metadata (a cluster still starting), an old GCS, a refused token: ray.init says
        return
    driver_python = platform.python_version()
    level = os.environ.get("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "patch")
    if not _python_matches(cluster_python, driver_python, level):
        raise InputError(
            f"{ADDRESS_VARIABLE}={address}: the Ray cluster runs Python {cluster_python}, this driver Python "
            f"{driver_python}: Ray needs the same Python (to the {level} level) on the driver; run fltest with "
            f"Python {cluster_python} or in the head (fltest-deploy run)"
        )


def join_cluster(address: str) -> None:
    """Connect this driver to the cluster, shipping the driver's ``sys.path`` to every worker."""
    _check_reachable(address)
    try:
        init_ray(address=address, logging_level="WARNING", log_to_driver=True)
    except Exception as exc:  # Ray raises RuntimeError, ConnectionError, ... for a cluster it cannot use
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunFailed(f"{ADDRESS_VARIABLE}={address}: cannot join the Ray cluster: {first_line}") from None
    remember_node_names()  # error lines name a lost node by its container or host name
    check_nodes_answer()


def cluster_node_gpus(address: str) -> list[float]:
    """The GPUs of every node Ray lists alive at ``address``, asked as a driver that joins and leaves again."""
    _check_reachable(address)
    try:
        with (
            warnings.catch_warnings()
        ):  # Ray's FutureWarning on accelerator variables: a check's refusal stays one line
            warnings.simplefilter("ignore", FutureWarning)
            init_ray(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as exc:  # as join_cluster: Ray raises several types for a cluster it cannot use
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunFailed(f"{ADDRESS_VARIABLE}={address}: cannot join the Ray cluster: {first_line}") from None
    try:
        return [float(node["Resources"].get("GPU", 0.0)) for node in ray.nodes() if node.get("Alive")]
    finally:
        ray.shutdown()


@ray.remote(num_cpus=0, max_retries=0)
def _answer() -> None:
    """Nothing: that it runs on its node is the answer."""


def check_nodes_answer() -> None:
    """Fail with one line naming the first node that Ray lists alive but that runs no task within :data:`NODE_ANSWER_TIMEOUT_S`.

    Flower sizes its actor pool from every node Ray lists alive, and Ray lists a killed or cut-off
    node alive until it misses its health checks (about 30 s by default, longer as a cluster sets
    it). An actor placed there never answers, and Flower waits for it with no timeout: the run
    outlives its round timeout (246 s for a 20 s round timeout, measured with a 240 s detection)
    and ends only when Ray declares the node dead. One task pinned to each node finds it first.
    """
    timeout_s = NODE_ANSWER_TIMEOUT_S  # read at each call: a test shortens it
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    probes = {
        _answer.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(): node
        for node in nodes
    }
    answered, silent = ray.wait(list(probes), num_returns=len(probes), timeout=timeout_s)
    for probe in silent:
        ray.cancel(probe, force=True)
    failures = [
        (probes[probe], f"ran no task within {timeout_s:g} s: stopped, or cut off from the driver") for probe in silent
    ]
    for probe in answered:
        try:
            ray.get(probe)
        except Exception as exc:  # Ray declared the node dead while it was asked
            failures.append((probes[probe], f"failed the task it was given ({type(exc).__name__})"))
    if failures:
        node, why = failures[0]
        ip = node.get("NodeManagerAddress", "")
        info = ray_node_info(ip)
        raise RunFailed(
            f"Ray node {info[0] if info else node.get('NodeManagerHostname', ip)} ({ip}) is listed alive but {why}"
        )


@ray.remote(num_cpus=0)
class ShardHolder:
    """Keeps the references to a run's shards, which the driver put into the object store, and hands a client its own.

    The ClientApps run in another Ray job (Flower's simulation runtime) than the driver that put the
    shards: they find this actor by its name, in :data:`~fltest.backends.flwr.shard_sources.HOLDER_NAMESPACE`.
    """

    def __init__(self, references: list[ray.ObjectRef]) -> None:
        """Keep ``references`` (a list, so that Ray hands the references over, not the shards)."""
        self._references = references

    def shard(self, partition_id: int) -> list[ray.ObjectRef]:
        """The reference to client ``partition_id``'s shard, in a list (the reference itself, not its data)."""
        return [self._references[partition_id]]


def hold_shards(shards: ShardSet) -> tuple[ray.actor.ActorHandle, str]:
    """Put every client's shard into the object store once and start the actor that hands them out; returns its
    handle (which the driver keeps for the run: the actor ends with it) and its name.

    The actor runs on the driver's own node, which owns the shards: a worker node lost during the run takes its
    clients with it (a failure naming that node), never every client's way to its shard.
    """
    references = put_shards(shards)
    name = f"fltest-shards-{uuid.uuid4().hex}"
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    holder = ShardHolder.options(name=name, namespace=HOLDER_NAMESPACE, scheduling_strategy=here).remote(
        [references[pid] for pid in range(shards.num_clients)]
    )
    ray.get(holder.shard.remote(0))  # started, and holding them
    return holder, name


def put_shards(shards: ShardSet) -> dict[int, ray.ObjectRef]:
    """Put every client's in-memory shard into the object store once, as its Arrow table; returns the references.

    The table alone: a pickled ``Dataset`` carries its table twice (measured: 318 KB against 158 KB).
    """
    from fltest.data.shards import client_dataset  # the datasets library: a Ray cluster's runs only (0.7 s)

    return {pid: ray.put(client_dataset(shards, pid).data.table) for pid in range(shards.num_clients)}
