"""The reference backend: FedAvg in plain numpy, one client after another, in process.

It is the ground truth the other backends are compared with: same config and
seed, same result, bit for bit.
"""

from __future__ import annotations

from fltest.backends.base import Backend, RunJob
from fltest.fedavg import aggregate, client_update, evaluate_global, select_clients
from fltest.hooks import load_hooks


class ReferenceBackend(Backend):
    """Sequential FedAvg over the memory-mapped shards."""

    framework = "reference"

    def run(self, job: RunJob) -> None:
        """Train ``rounds`` rounds, recording the global model after each."""
        config, shards = job.config, job.shards
        hooks = load_hooks(config.hooks)
        client_data = [shards.client_arrays(i) for i in range(shards.num_clients)]
        test_x, test_y = shards.test_arrays()
        job.recorder.setup_done()
        params = job.initial_params
        for server_round in range(1, config.training.rounds + 1):
            selected = select_clients(shards.num_clients, config.training.fraction_fit, config.seed, server_round)
            updates = [
                client_update(config, hooks, pid, server_round, params, *client_data[pid]) for pid in selected
            ]
            params, train_metrics = aggregate(updates)
            job.recorder.record_round(
                server_round, params, evaluate_global(params, test_x, test_y, hooks), train_metrics, selected
            )
