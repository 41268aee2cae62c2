"""Run FLTest's experiment as a Flower simulation, on a private Ray or on a joined cluster."""

from __future__ import annotations

import logging
import threading
import warnings

import cloudpickle
from flwr.app import ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fltest.backends.base import Backend, RunJob
from fltest.backends.flwr.client_app import ShardSource, make_client_app, params_to_record, record_to_params
from fltest.backends.flwr.cluster import LocalCacheShards, ObjectStoreShards, join_cluster, put_shards
from fltest.backends.flwr.stoppable_grid import RunStopped, StoppableGrid
from fltest.backends.flwr.strategy import SelectedFedAvg, discover_partitions
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.config.schema import ExperimentConfig
from fltest.data.shards import Storage
from fltest.fedavg import evaluate_global
from fltest.hooks import load_hooks

log = logging.getLogger(__name__)


def _make_server_app(job: RunJob, stop: threading.Event) -> ServerApp:
    """The ServerApp: discover partitions, run SelectedFedAvg, record every round; it returns once ``stop`` is set."""
    config, recorder = job.config, job.recorder
    hooks = load_hooks(config.hooks)
    test_x, test_y = job.shards.test_arrays()
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            run_rounds(StoppableGrid(grid, stop))
        except RunStopped:  # Ctrl-C: the main thread records the run as interrupted
            return

    def run_rounds(grid: Grid) -> None:
        timeout = config.training.round_timeout_s
        mapping = discover_partitions(grid, config.clients, timeout)
        recorder.setup_done()
        strategy = SelectedFedAvg(mapping, config.seed, config.training.fraction_fit)

        def evaluate(server_round: int, arrays) -> MetricRecord:
            params = record_to_params(arrays)
            metrics = evaluate_global(params, test_x, test_y, hooks)
            if server_round > 0:
                recorder.record_round(
                    server_round, params, metrics, strategy.train_metrics[server_round], strategy.selected[server_round]
                )
            return MetricRecord(metrics)

        strategy.start(
            grid=grid,
            initial_arrays=params_to_record(job.initial_params),
            num_rounds=config.training.rounds,
            timeout=timeout,
            train_config=ConfigRecord(),
            evaluate_fn=evaluate,
        )
        recorder.info["client_hosts"] = sorted(strategy.client_hosts)

    return app


class FlwrBackend(Backend):
    """Flower 1.42 simulation (Message API: ServerApp, ClientApp, FedAvg) on Ray."""

    framework = "flwr"
    known_options = frozenset({"mode"})

    def storage(self, config: ExperimentConfig) -> Storage:
        """In-memory shards on a joined cluster (they travel), memory-mapped ones on a private Ray."""
        return "memory" if cluster_address() else "mmap"

    def cluster_shard_source(self, job: RunJob) -> ShardSource:
        """Put each client's shard into the object store once; clients fetch theirs by reference."""
        refs = put_shards(job.shards)
        job.recorder.info["shards_put"] = len(refs)
        return ObjectStoreShards(refs)

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
        job.recorder.info["client_app_pickled_bytes"] = len(cloudpickle.dumps(client_app))
        job.recorder.info["ray_address"] = address or "local"
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
