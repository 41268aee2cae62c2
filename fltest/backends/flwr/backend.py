"""Run FLTest's experiment as a Flower simulation: ``flwr run`` on a simulation SuperLink of the run's own.

The App is the one a deployment runs (:mod:`fltest.backends.flwr_deployment.app_dir`); its run
config names where the clients find their shards (:mod:`.shard_sources`). The SuperLink's simulation
runtime starts a Ray of its own, or joins the cluster ``FLTEST_RAY_ADDRESS`` names; fltest follows
the run's log as it follows a deployment's (:class:`~fltest.backends.flwr_deployment.log_stream.FlowerRunTransport`).
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from pathlib import Path

from fltest.backends.base import Backend, RunJob
from fltest.backends.flwr.pulling_grid import SIMULATION_PULL_INTERVAL_S
from fltest.backends.flwr.shard_sources import cache_spec, holder_spec
from fltest.backends.flwr.superlink import SimulationSuperLink
from fltest.backends.flwr.unsupported import unsupported
from fltest.backends.flwr_deployment.app_dir import write_app_dir
from fltest.backends.flwr_deployment.connection import CONNECTION, LoadedFlwr, flwr_json, write_connection
from fltest.backends.flwr_deployment.log_stream import FlowerRunTransport
from fltest.backends.flwr_deployment.run_config import NODE_NAMES_KEY, PULL_INTERVAL_KEY, SHARD_SOURCE_KEY
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.backends.supervision import Deadlines, follow_run
from fltest.config.schema import ExperimentConfig, RunConfig
from fltest.data.shard_set import Storage
from fltest.errors import RunFailed
from fltest.process_guard import ENDED_RUN_GRACE_S, STOP_GRACE_S

log = logging.getLogger(__name__)
SIMULATION_NAME = "the Flower simulation"  # its Flower run lives on a SuperLink of its own: its id tells a user nothing


def gpu_share(config: ExperimentConfig) -> float:
    """The GPUs each Flower client asks Ray for: ``total_gpus / total_cpus`` (0 without GPUs)."""
    return config.total_gpus / config.total_cpus if config.total_gpus else 0.0


def federation_config(config: ExperimentConfig, joined: bool) -> str:
    """``flwr run --federation-config``'s value: a SuperNode a client, each asking Ray for one CPU and its GPU share;
    on a private Ray, that Ray's CPUs and GPUs (``total_cpus``, ``total_gpus`` rounded up: Ray counts whole GPUs)."""
    settings = {
        "num-supernodes": config.clients,
        "client-resources-num-cpus": 1,
        "client-resources-num-gpus": gpu_share(config),
    }
    if not joined:  # a joined cluster's resources are its nodes': Ray refuses them from a driver that attaches
        settings |= {"init-args-num-cpus": config.total_cpus, "init-args-num-gpus": math.ceil(config.total_gpus)}
    return " ".join(f"{key}={value}" for key, value in settings.items())


def client_app_pickled_bytes() -> int:
    """The size of the ClientApp as Flower's simulation pickles it with every message (it closes over no data)."""
    import cloudpickle

    from fltest.backends.flwr_deployment.client_component import client_app

    return len(cloudpickle.dumps(client_app))


class FlwrBackend(Backend):
    """Flower 1.42 simulation (Message API: ServerApp, ClientApp, Flower's strategy classes) through ``flwr run``."""

    framework = "flwr"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why Flower has no implementation of the config's strategy (SCAFFOLD), else ``None``."""
        return unsupported(config.training)

    def storage(self, config: ExperimentConfig) -> Storage:
        """In-memory shards on a joined cluster (they travel), memory-mapped ones on one machine."""
        return "memory" if cluster_address() else "mmap"

    def check(self, config: ExperimentConfig, run: RunConfig) -> None:
        """On a joined cluster, refuse (one line) a driver whose Python is not the cluster's, and a run that asks
        for more GPUs than the cluster's nodes offer."""
        from fltest.backends.flwr.cluster import check_same_python, cluster_node_gpus
        from fltest.validate import check_cluster_gpus

        address = cluster_address()
        if address:
            check_same_python(address)
            if config.total_gpus:
                check_cluster_gpus(config, cluster_node_gpus(address), f"the Ray cluster at {address}")

    def run(self, job: RunJob) -> None:
        """Start the run's SuperLink, submit the App, follow it to its end; a client error fails the run, a stop signal
        stops the Flower run, then the SuperLink."""
        config = job.config
        address = cluster_address()
        with tempfile.TemporaryDirectory(prefix="fltest-flwr-") as tmp:
            folder = Path(tmp)
            superlink = SimulationSuperLink(folder / "superlink", address or "local")
            # A run stopped or failed mid-way: every process gets Flower's and Ray's own shutdown
            grace_s = STOP_GRACE_S
            try:
                extra, holder = self._shard_settings(job, address)  # holder: kept for the run (its shards end with it)
                app = write_app_dir(folder / "app", config, job.shards, job.initial_params, extra)
                home = write_connection(folder / "flwr-home", superlink.address, None).parent
                submit = LoadedFlwr(home)  # Flower's CLI imports while the SuperLink starts
                try:
                    superlink.start()
                except BaseException:
                    submit.cancel()
                    raise
                deadlines = Deadlines.of(config)
                answer = flwr_json(
                    home,
                    "run",
                    str(app),
                    CONNECTION,
                    "--federation-config",
                    federation_config(config, joined=address is not None),
                    timeout=deadlines.startup_s,
                    loaded=submit,
                )
                run_id = int(answer["run-id"])
                job.progress.note(
                    flower_run_id=run_id,
                    ray_address=address or "local",
                    client_gpus=gpu_share(config),
                    client_app_pickled_bytes=client_app_pickled_bytes(),
                )
                # FLTEST-DONE carries everything: Flower's own teardown (its Ray's shutdown, about 3 s here) ends with
                # the SuperLink, stopped next, instead of being waited for
                transport = FlowerRunTransport(home, run_id, name=SIMULATION_NAME, end_wait_s=0.0)
                done = follow_run(transport, job.progress, config.training.rounds, deadlines)
                job.progress.note(client_hosts=done["client_hosts"])
                grace_s = ENDED_RUN_GRACE_S
            except RunFailed as exc:
                ended = superlink.ended()
                if ended:
                    raise RunFailed(f"{exc} ({ended})") from None
                raise
            finally:
                superlink.stop(grace_s)
                if address:
                    import ray

                    ray.shutdown()  # the shards' holder and the shards end with this driver

    def _shard_settings(self, job: RunJob, address: str | None) -> tuple[dict[str, str | int | float], object]:
        """The simulation's run-config values: where its clients find their shards (on a cluster, put into its
        object store now), the ServerApp's pull interval, and the cluster nodes' names; and, on a cluster, the
        handle of the actor holding the shards (``None`` on one machine)."""
        settings: dict[str, str | int | float] = {PULL_INTERVAL_KEY: SIMULATION_PULL_INTERVAL_S}
        if not address:
            return settings | {SHARD_SOURCE_KEY: cache_spec(job.shards)}, None
        from fltest.backends.flwr.cluster import hold_shards, join_cluster
        from fltest.backends.flwr.ray_errors import remember_node_names

        log.info(
            "%s=%s: joining that Ray cluster; total_cpus/total_gpus are ignored%s",
            ADDRESS_VARIABLE,
            address,
            f", but for each client's GPU share (total_gpus/total_cpus = {gpu_share(job.config):g})"
            if job.config.total_gpus
            else "",
        )
        join_cluster(address)
        holder, name = hold_shards(job.shards)
        job.progress.note(shards_put=job.shards.num_clients)
        return settings | {
            SHARD_SOURCE_KEY: holder_spec(name, job.shards.scale),
            NODE_NAMES_KEY: json.dumps(remember_node_names()),
        }, holder
