"""The ServerApp's work, the same in both Flower modes: find the clients, run Flower's strategy, report.

When round 1 trains every client (``fraction_fit`` 1), the clients are not queried first: round
1's replies say which node holds which partition, saving a message to every client (in a
deployment, a ClientApp process on each SuperNode and a SuperNode poll) before round 1. Round 1
then also starts the clients, so its replies get the start-up allowance on top.

The ServerApp runs where Flower runs it (a deployment's SuperLink, a simulation's ``flwr-simulation``
process) and reports as lines of the run's log (:mod:`fltest.backends.flwr_deployment.channel`). It
starts from the initial model the driver made, waits as :class:`~fltest.backends.supervision.Deadlines`
says, and reports through a :class:`RunSink`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Protocol

from flwr.app import ArrayRecord, ConfigRecord

from fltest.backends.flwr.client_app import params_to_record, record_to_params
from fltest.backends.flwr.privacy import private_strategy
from fltest.backends.flwr.pulling_grid import PullingGrid
from fltest.backends.flwr.strategy import flower_strategy, query_partitions, wait_for_nodes
from fltest.backends.supervision.deadlines import Deadlines
from fltest.config.privacy import LocalGaussian, NoisedAveraging
from fltest.config.schema import ExperimentConfig, clients_per_round
from fltest.errors import FLTestError
from fltest.fedavg import select_clients
from fltest.params import Params
from fltest.privacy.local import released
from fltest.rounds import RoundPrivacy, RoundResult


class RunSink(Protocol):
    """Where the server loop reports the run."""

    def ready(self) -> None:
        """Every client is connected (and, when queried, answered): set-up is over."""

    def round_done(self, result: RoundResult) -> None:
        """A round ended."""

    def failed(self, reason: str) -> None:
        """The run failed (one line)."""

    def done(self, client_hosts: list[str]) -> None:
        """Every round ended; the clients trained on ``client_hosts``."""


def serve_rounds(
    grid: PullingGrid, config: ExperimentConfig, initial: Params, sink: RunSink, node_label: str | None = None
) -> None:
    """Train ``config``'s rounds from ``initial`` on the nodes of ``grid``, reporting to ``sink``.

    ``node_label`` names a client's node in failure lines by its host (``SuperNode`` gives
    ``client 1 (SuperNode <hostname>, Flower node <id>)``). A failure is reported, then raised,
    so that Flower records the run as failed too.
    """
    deadlines = Deadlines.of(config)
    try:
        training = config.training
        began = time.monotonic()
        node_ids = wait_for_nodes(grid, config.clients, deadlines.discovery_s)
        hosts: dict[int, str] = {}
        if len(select_clients(config.clients, training.fraction_fit, config.seed, 1)) < config.clients:
            left = deadlines.discovery_s - (time.monotonic() - began)
            mapping = query_partitions(grid, node_ids, max(left, 1.0), hosts)
        else:
            mapping = None  # learnt from round 1, whose wait includes the clients' start
            grid.allow_once(deadlines.startup_s)
        sink.ready()
        strategy = flower_strategy(training, node_ids, mapping, config.seed, node_label, hosts)
        private = None
        if isinstance(training.privacy, NoisedAveraging):  # Flower's DP wrapper around it
            sampled = clients_per_round(config.clients, training.fraction_fit)
            private = private_strategy(training.privacy, strategy, sampled, config.clients, config.seed)

        def round_privacy(server_round: int) -> RoundPrivacy | None:
            if private is not None:
                return private.released[server_round]
            if isinstance(training.privacy, LocalGaussian):  # the clients' noise is theirs; Flower accounts none
                return replace(released(training.privacy, server_round, noise_std=None), epsilon=None)
            return None

        def report(server_round: int, arrays: ArrayRecord) -> None:
            if server_round > 0:
                sink.round_done(
                    RoundResult(
                        server_round,
                        record_to_params(arrays),
                        strategy.train_metrics[server_round],
                        strategy.selected[server_round],
                        privacy=round_privacy(server_round),
                    )
                )

        (strategy if private is None else private).start(
            grid=grid,
            initial_arrays=params_to_record(initial),
            num_rounds=training.rounds,
            timeout=deadlines.replies_s,
            train_config=ConfigRecord(),
            evaluate_fn=report,
        )
    except FLTestError as exc:
        sink.failed(str(exc))
        raise
    except Exception as exc:
        sink.failed(f"{type(exc).__name__}: {exc}")
        raise
    sink.done(sorted(strategy.client_hosts))
