"""A Ray head and one more node on this machine, for the tests that join a cluster (``FLTEST_RAY_ADDRESS``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import ray


@contextmanager
def head_and_node(monkeypatch: pytest.MonkeyPatch, node_args: dict | None = None, **head_args) -> Iterator[tuple]:
    """A Ray head and one more node, one CPU each (``head_args``/``node_args`` add to them: ``num_gpus`` gives
    Ray's logical GPUs), ``FLTEST_RAY_ADDRESS`` set to it; yields ``(cluster, node)``, stopped by their handle."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **head_args})
    try:
        node = cluster.add_node(num_cpus=1, **(node_args or {}))
        cluster.wait_for_nodes()
        if ray.is_initialized():  # waiting may have connected this process; fltest must connect itself
            ray.shutdown()
        monkeypatch.setenv("FLTEST_RAY_ADDRESS", cluster.address)
        yield cluster, node
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
