"""Benchmark: the flwr backend on a 2-node local Ray cluster, object-store shards vs shards read from a shared folder.

For 10, 60 and 120 clients it runs the same experiment twice on one 2-node cluster
started here (head + one node, one CPU each): (a) fltest's way, each shard put in
Ray's object store once, a named actor holding the references, each client fetching its
own; (b) each client reading its shard from the driver's cache folder, which works only
where every node sees that folder (one host, or a shared filesystem). It prints the wall
times side by side, then the flwr/reference time ratio on one machine (private Ray).
Run: ``python bench/flwr_cluster.py [--clients 10 60 120] [--rounds 3] [--single-clients 10]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from fltest.backends.base import RunJob
from fltest.backends.flwr.backend import FlwrBackend
from fltest.backends.flwr.cluster import join_cluster
from fltest.backends.flwr.pulling_grid import SIMULATION_PULL_INTERVAL_S
from fltest.backends.flwr.shard_sources import cache_spec
from fltest.backends.flwr_deployment.run_config import PULL_INTERVAL_KEY, SHARD_SOURCE_KEY
from fltest.config.schema import ExperimentConfig
from fltest.runner import run_experiment


class SharedFolderFlwrBackend(FlwrBackend):
    """Each client reads its shard from the driver's cache folder, as a shared filesystem would serve it."""

    def _shard_settings(self, job: RunJob, address: str | None):
        """The cache folder as the shard source; the driver still joins (and checks) the cluster."""
        join_cluster(address)
        return {PULL_INTERVAL_KEY: SIMULATION_PULL_INTERVAL_S, SHARD_SOURCE_KEY: cache_spec(job.shards)}, None


def _config(clients: int, rounds: int, frameworks: list[str]) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": f"bench-{clients}",
            "dataset": {"source": "digits", "scale": 16.0},
            "partition": {"method": "iid"},
            "clients": clients,
            "training": {"rounds": rounds, "local_epochs": 1, "learning_rate": 0.5, "round_timeout_s": 600},
            "total_cpus": 2,
            "runs": [{"name": f, "framework": f} for f in frameworks],
        }
    )


def _summary(results: Path, config: ExperimentConfig, run: str) -> dict:
    return json.loads((results / config.name / run / "summary.json").read_text())


def _cluster_run(clients: int, rounds: int, results: Path, backend: FlwrBackend) -> dict:
    config = _config(clients, rounds, ["flwr"])
    run_experiment(config, results, backend_of=lambda run: backend)
    summary = _summary(results, config, "flwr")
    assert summary["status"] == "completed", summary["error"]
    return summary


def main() -> None:
    """Print the side-by-side table and the single-machine ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 60, 120])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single-clients", type=int, default=10, help="clients of the one-machine flwr/reference run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp)
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            if ray.is_initialized():
                ray.shutdown()
            os.environ["FLTEST_RAY_ADDRESS"] = cluster.address
            print(f"{'clients':>7}  {'object-store s':>14}  {'shared-folder s':>15}  {'folder/store time':>17}")
            for clients in args.clients:
                ours = _cluster_run(clients, args.rounds, results / "ours", FlwrBackend())
                folder = _cluster_run(clients, args.rounds, results / "folder", SharedFolderFlwrBackend())
                print(
                    f"{clients:>7}  {ours['wall_s']:>14.1f}  {folder['wall_s']:>15.1f}  "
                    f"{folder['wall_s'] / ours['wall_s']:>17.2f}",
                    flush=True,
                )
        finally:
            os.environ.pop("FLTEST_RAY_ADDRESS", None)
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()
        config = _config(args.single_clients, args.rounds, ["reference", "flwr"])
        run_experiment(config, results / "single")
        reference, flower = (_summary(results / "single", config, r)["wall_s"] for r in ("reference", "flwr"))
        print(
            f"one machine, {args.single_clients} clients: reference {reference:.2f} s, flwr {flower:.2f} s, "
            f"flwr/reference {flower / reference:.1f}"
        )


if __name__ == "__main__":
    main()
