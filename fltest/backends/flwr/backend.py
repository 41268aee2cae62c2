"""Run FLTest's experiment as a Flower simulation, on a private Ray or on a joined cluster."""

from __future__ import annotations

import logging
import threading
import warnings

import cloudpickle
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fltest.backends.base import STARTUP_S, Backend, RunJob
from fltest.backends.flwr.client_app import ShardSource, make_client_app, params_to_record, record_to_params
from fltest.backends.flwr.cluster import LocalCacheShards, ObjectStoreShards, join_cluster, put_shards
from fltest.backends.flwr.stoppable_grid import RunStopped, StoppableGrid
from fltest.backends.flwr.strategy import discover_partitions, flower_strategy, unsupported
from fltest.backends.flwr.time_limit import REPLY_GRACE_S
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.config.schema import ExperimentConfig
from fltest.data.shards import Storage
from fltest.rounds import RoundResult

log = logging.getLogger(__name__)


def _make_server_app(job: RunJob, stop: threading.Event) -> ServerApp:
    """The ServerApp: discover partitions, run Flower's strategy, report every round; it returns once ``stop`` is set."""
    config, progress = job.config, job.progress
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            run_rounds(StoppableGrid(grid, stop))
        except RunStopped:  # Ctrl-C: the main thread records the run as interrupted
            return

    def run_rounds(grid: Grid) -> None:
        timeout = config.training.round_timeout_s
        mapping = discover_partitions(grid, config.clients, STARTUP_S + timeout)  # the actors start on their first message
        progress.setup_done()
        strategy = flower_strategy(config.training.strategy, mapping, config.seed, config.training.fraction_fit)

        def report(server_round: int, arrays: ArrayRecord) -> None:
            if server_round > 0:
                progress.round_done(RoundResult(
                    server_round, record_to_params(arrays), strategy.train_metrics[server_round], strategy.selected[server_round]
                ))  # fmt: skip

        strategy.start(
            grid=grid,
            initial_arrays=params_to_record(job.initial_params),
            num_rounds=config.training.rounds,
            timeout=timeout + REPLY_GRACE_S,
            train_config=ConfigRecord(),
            evaluate_fn=report,
        )
        progress.note(client_hosts=sorted(strategy.client_hosts))

    return app


class FlwrBackend(Backend):
    """Flower 1.42 simulation (Message API: ServerApp, ClientApp, Flower's strategy classes) on Ray."""

    framework = "flwr"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why Flower has no implementation of the config's strategy (SCAFFOLD), else ``None``."""
        return unsupported(config.training.strategy)

    def storage(self, config: ExperimentConfig) -> Storage:
        """In-memory shards on a joined cluster (they travel), memory-mapped ones on a private Ray."""
        return "memory" if cluster_address() else "mmap"

    def cluster_shard_source(self, job: RunJob) -> ShardSource:
        """Put each client's shard into the object store once; clients fetch theirs by reference."""
        refs = put_shards(job.shards)
        job.progress.note(shards_put=len(refs))
        return ObjectStoreShards(refs, job.shards.scale)

    def run(self, job: RunJob) -> None:
        """Start the simulation and block until it ends; a client error fails the run."""
        config = job.config
        address = cluster_address()
        client_resources = {"num_cpus": 1, "num_gpus": config.total_gpus / config.total_cpus if config.total_gpus else 0.0}
        if address:
            log.info("%s=%s: joining that Ray cluster; total_cpus/total_gpus are ignored", ADDRESS_VARIABLE, address)
            join_cluster(address)
            shard_source = self.cluster_shard_source(job)
            backend_config = {"client_resources": client_resources}
        else:
            shard_source = LocalCacheShards(job.shards)
            backend_config = {
                "client_resources": client_resources,
                "init_args": {
                    "address": "local",  # never attach to another cluster on this machine
                    "num_cpus": config.total_cpus,
                    "num_gpus": config.total_gpus,
                    "logging_level": "WARNING",
                },
            }
        flwr_log = logging.getLogger("flwr")
        flwr_log.propagate = False  # Flower has its own handler: no second copy of each line
        if not log.isEnabledFor(logging.DEBUG):
            flwr_log.setLevel(logging.WARNING)
        client_app = make_client_app(config, shard_source)
        job.progress.note(client_app_pickled_bytes=len(cloudpickle.dumps(client_app)), ray_address=address or "local")
        stop = threading.Event()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                run_simulation(
                    server_app=_make_server_app(job, stop),
                    client_app=client_app,
                    num_supernodes=config.clients,
                    backend_config=backend_config,
                )
        finally:
            stop.set()  # the ServerApp's thread, if still waiting for replies, returns at once
