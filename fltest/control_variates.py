"""SCAFFOLD's client side (Karimireddy et al., 2020, Algorithm 1): a client's control variate ``c_i``, kept between its rounds.

In a round, client ``i`` gets the global model ``x`` and the server's control variate ``c``, trains
``K`` minibatch steps from ``y_i = x`` with ``y_i -= η_l (g_i(y_i) - c_i + c)`` (the model's train
adds ``correction = c - c_i`` to each gradient), then takes option II's new control variate
``c_i+ = c_i - c + (x - y_i) / (K η_l)`` and replies ``y_i`` with ``Δc_i = c_i+ - c_i``; ``c_i`` starts
at 0. ``K`` is the number of minibatches local training takes, ``η_l`` the config's learning rate.
Every backend that runs SCAFFOLD trains its clients through :class:`ClientControl`.
"""

from __future__ import annotations

import numpy as np

from fltest.config.schema import ExperimentConfig
from fltest.fedavg import ClientUpdate, client_update
from fltest.hooks import Hooks
from fltest.model.batches import local_step_count
from fltest.params import Params, shaped_like


def next_control(
    local: Params, server: Params, start: Params, trained: Params, steps: int, learning_rate: float
) -> Params:
    """Option II: ``c_i+ = c_i - c + (x - y_i) / (K η_l)`` from ``c_i`` (``local``), ``c`` (``server``), ``x`` (``start``),
    ``y_i`` (``trained``), ``K`` (``steps``) and ``η_l``."""
    scale = steps * learning_rate
    return shaped_like([c_i - c + (x - y) / scale for c_i, c, x, y in zip(local, server, start, trained)], start)


class ClientControl:
    """One client's control variate ``c_i`` (0 until its first round) and its SCAFFOLD rounds."""

    def __init__(self, variate: Params | None = None) -> None:
        """A client with control variate ``variate`` from its last round (``None``: it has not trained yet)."""
        self.variate = variate

    def train(
        self,
        config: ExperimentConfig,
        hooks: Hooks,
        partition_id: int,
        server_round: int,
        params: Params,
        server_control: Params,
        x: np.ndarray,
        y: np.ndarray,
    ) -> ClientUpdate:
        """One round: local training corrected by ``c - c_i``, then ``c_i`` moves to ``c_i+``; the update carries ``Δc_i``."""
        local = self.variate if self.variate is not None else [np.zeros_like(p) for p in params]
        correction = shaped_like([c - c_i for c, c_i in zip(server_control, local)], params)
        update = client_update(config, hooks, partition_id, server_round, params, x, y, correction)
        steps = local_step_count(update.num_examples, config.training)
        self.variate = next_control(local, server_control, params, update.params, steps, config.training.learning_rate)
        delta = shaped_like([new - old for new, old in zip(self.variate, local)], params)
        return ClientUpdate(
            update.partition_id, update.params, update.num_examples, update.metrics, control_delta=delta
        )
