"""Run FLTest's experiment as a Flower simulation, on a private Ray or on a joined cluster."""

from __future__ import annotations

import logging

import cloudpickle
import ray

from fltest.backends.base import Backend, RunJob
from fltest.backends.flwr.client_app import ShardSource, make_client_app
from fltest.backends.flwr.cluster import (
    LocalCacheShards,
    ObjectStoreShards,
    check_same_python,
    cluster_node_gpus,
    join_cluster,
    put_shards,
)
from fltest.backends.flwr.ray_session import start_private_ray
from fltest.backends.flwr.simulation import SimulationTransport
from fltest.backends.flwr.unsupported import unsupported
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.backends.supervision import Deadlines, follow_run
from fltest.config.schema import ExperimentConfig, RunConfig
from fltest.data.shard_set import Storage
from fltest.validate import check_cluster_gpus

log = logging.getLogger(__name__)


def gpu_share(config: ExperimentConfig) -> float:
    """The GPUs each Flower client asks Ray for: ``total_gpus / total_cpus`` (0 without GPUs)."""
    return config.total_gpus / config.total_cpus if config.total_gpus else 0.0


class FlwrBackend(Backend):
    """Flower 1.42 simulation (Message API: ServerApp, ClientApp, Flower's strategy classes) on Ray."""

    framework = "flwr"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why Flower has no implementation of the config's strategy (SCAFFOLD), else ``None``."""
        return unsupported(config.training.strategy)

    def storage(self, config: ExperimentConfig) -> Storage:
        """In-memory shards on a joined cluster (they travel), memory-mapped ones on a private Ray."""
        return "memory" if cluster_address() else "mmap"

    def check(self, config: ExperimentConfig, run: RunConfig) -> None:
        """On a joined cluster, refuse (one line) a driver whose Python is not the cluster's, and a run that asks
        for more GPUs than the cluster's nodes offer."""
        address = cluster_address()
        if address:
            check_same_python(address)
            if config.total_gpus:
                check_cluster_gpus(config, cluster_node_gpus(address), f"the Ray cluster at {address}")

    def cluster_shard_source(self, job: RunJob) -> ShardSource:
        """Put each client's shard into the object store once; clients fetch theirs by reference."""
        refs = put_shards(job.shards)
        job.progress.note(shards_put=len(refs))
        return ObjectStoreShards(refs, job.shards.scale)

    def run(self, job: RunJob) -> None:
        """Start Ray and the simulation, follow it to its end; a client error fails the run, a stop signal stops it."""
        config = job.config
        address = cluster_address()
        simulation: SimulationTransport | None = None
        try:
            if address:
                log.info(
                    "%s=%s: joining that Ray cluster; total_cpus/total_gpus are ignored%s",
                    ADDRESS_VARIABLE,
                    address,
                    f", but for each client's GPU share (total_gpus/total_cpus = {gpu_share(config):g})"
                    if config.total_gpus
                    else "",
                )
                join_cluster(address)
                shard_source = self.cluster_shard_source(job)
            else:
                start_private_ray(config)
                shard_source = LocalCacheShards(job.shards)
            simulation = self._simulation(job, shard_source, address)
            simulation.start()
            done = follow_run(simulation, job.progress, config.training.rounds, Deadlines.of(config))
            job.progress.note(client_hosts=done["client_hosts"])
        finally:
            if simulation is None or not simulation.running:
                ray.shutdown()  # Flower shuts Ray down as its simulation ends, not when it never started

    def _simulation(self, job: RunJob, shard_source: ShardSource, address: str | None) -> SimulationTransport:
        """The simulation of ``job`` on the Ray this process started or joined (not started yet)."""
        config = job.config
        client_resources = {"num_cpus": 1, "num_gpus": gpu_share(config)}
        flwr_log = logging.getLogger("flwr")
        flwr_log.propagate = False  # Flower has its own handler: no second copy of each line
        if not log.isEnabledFor(logging.DEBUG):
            flwr_log.setLevel(logging.WARNING)
        client_app = make_client_app(config, shard_source)
        job.progress.note(
            client_app_pickled_bytes=len(cloudpickle.dumps(client_app)),
            ray_address=address or "local",
            client_gpus=client_resources["num_gpus"],
        )
        return SimulationTransport(config, job.initial_params, client_app, {"client_resources": client_resources})
