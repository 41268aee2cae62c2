"""The reference backend: the experiment's strategy in plain numpy, one client after another, in process.

It is the ground truth the other backends are compared with: same config and seed, same
result, bit for bit for FedAvg. Its server steps are :mod:`fltest.server_update`'s, written
from the strategies' papers.
"""

from __future__ import annotations

from fltest.backends.base import Backend, RunJob
from fltest.config.privacy import LocalGaussian, NoisedAveraging, SharedChanges
from fltest.config.schema import ExperimentConfig, clients_per_round
from fltest.control_variates import ClientControl
from fltest.fedavg import aggregate, client_update, select_clients
from fltest.privacy.averaging import PrivateAveraging
from fltest.privacy.local import sent_privately
from fltest.privacy.sharing import SharedChangesAveraging
from fltest.rounds import RoundResult
from fltest.server_update import ControlledAveraging, ServerUpdate, server_update


def server_of(config: ExperimentConfig) -> ServerUpdate:
    """The reference's server step for ``config``: under ``training.privacy`` DP-FedAvg's or that of clients sharing
    part of their change, else (local privacy too) the strategy's."""
    training = config.training
    if isinstance(training.privacy, SharedChanges):
        return SharedChangesAveraging(training.privacy)
    if isinstance(training.privacy, NoisedAveraging):
        return PrivateAveraging(training.privacy, clients_per_round(config.clients, training.fraction_fit), config.seed)
    return server_update(training.strategy, config.clients, training.learning_rate)


class ReferenceBackend(Backend):
    """The strategy, client after client, over the memory-mapped shards."""

    framework = "reference"

    def run(self, job: RunJob) -> None:
        """Train ``rounds`` rounds, reporting the global model after each."""
        config, shards = job.config, job.shards
        client_data = [shards.client_arrays(i) for i in range(shards.num_clients)]
        job.progress.setup_done()
        params = job.initial_params
        server = server_of(config)
        controls = [ClientControl() for _ in range(shards.num_clients)]  # SCAFFOLD's c_i, kept on each client
        for server_round in range(1, config.training.rounds + 1):
            selected = select_clients(shards.num_clients, config.training.fraction_fit, config.seed, server_round)
            if isinstance(server, ControlledAveraging):
                server_control = server.control(params)
                updates = [
                    controls[pid].train(config, job.hooks, pid, server_round, params, server_control, *client_data[pid])
                    for pid in selected
                ]
            else:
                updates = [
                    client_update(config, job.hooks, pid, server_round, params, *client_data[pid]) for pid in selected
                ]
            _, train_metrics = aggregate(updates)
            privacy = None
            if isinstance(config.training.privacy, LocalGaussian):  # each client noises what it sends
                updates, privacy = sent_privately(config.training.privacy, config.seed, server_round, params, updates)
            params = server.apply(params, updates)
            if isinstance(server, PrivateAveraging):
                privacy = server.released[-1]
            job.progress.round_done(RoundResult(server_round, params, train_metrics, selected, privacy=privacy))
