"""How the reference server turns a round's client models into the next global model, for each strategy.

Each rule is written plainly from its paper, with the equation in its docstring; FLTest's
framework runs are compared with these. The updates arrive sorted by partition id, and every
sum runs in that order. A rule keeps its state (momentum, second moments) from round to round.
Every rule returns each parameter with the global model's dtype and shape, 0-d arrays included
(a BatchNorm's ``num_batches_tracked``), whatever the model.

- FedAvg (McMahan et al., 2017) and FedProx (Li et al., 2020, whose difference is in local
  training: :attr:`fltest.config.strategies.FedProxStrategy.proximal_mu`): the average of the
  client models weighted by their numbers of examples.
- FedAvgM (Hsu, Qi and Brown, 2019, "Measuring the Effects of Non-Identical Data Distribution
  for Federated Visual Classification", Algorithm 1 with a server learning rate).
- FedAdagrad, FedAdam, FedYogi (Reddi et al., 2021, "Adaptive Federated Optimization",
  Algorithm 2).
- SCAFFOLD (Karimireddy et al., 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated
  Learning", Algorithm 1; its clients: :mod:`fltest.control_variates`).
- The robust aggregators, FedMedian, FedTrimmedAvg, Krum, Multi-Krum and Bulyan: :mod:`fltest.robust_aggregation`.
- q-FedAvg (Li et al., 2020): :mod:`fltest.fair_averaging`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from fltest.config.strategies import (
    BulyanStrategy,
    FedAdagradStrategy,
    FedAdamStrategy,
    FedAvgMStrategy,
    FedMedianStrategy,
    FedTrimmedAvgStrategy,
    FedYogiStrategy,
    KrumStrategy,
    QFedAvgStrategy,
    ScaffoldStrategy,
    StrategyConfig,
)
from fltest.fair_averaging import QFairAveraging
from fltest.fedavg import ClientUpdate, aggregate
from fltest.params import Params, shaped_like
from fltest.robust_aggregation import Bulyan, CoordinateMedian, KrumSelection, TrimmedMean


class ServerUpdate(Protocol):
    """A strategy's server step."""

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The next global model from the current one and the round's client updates (in partition order)."""


class WeightedAverage:
    """FedAvg and FedProx: ``w_{t+1} = Σ_k (n_k / n) w_k``, the clients' models weighted by examples."""

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The weighted average of the clients' models (:func:`fltest.fedavg.aggregate`)."""
        return shaped_like(aggregate(updates)[0], global_params)


class ServerMomentum:
    """FedAvgM (Hsu et al., 2019, Algorithm 1), with a server learning rate η (1 in the paper):

    ``Δw = Σ_k (n_k / n) (w_t - w_k)``, ``v = β v + Δw`` (``v`` starts at 0), ``w_{t+1} = w_t - η v``.
    """

    def __init__(self, strategy: FedAvgMStrategy) -> None:
        self.learning_rate, self.momentum = strategy.server_learning_rate, strategy.server_momentum
        self.velocity: Params | None = None

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """One momentum step along the pseudo-gradient ``w_t - average``."""
        average = aggregate(updates)[0]
        pseudo_gradient = [w - a for w, a in zip(global_params, average)]
        if self.velocity is None:
            self.velocity = [np.zeros_like(w) for w in global_params]
        self.velocity = [self.momentum * v + d for v, d in zip(self.velocity, pseudo_gradient)]
        return shaped_like([w - self.learning_rate * v for w, v in zip(global_params, self.velocity)], global_params)


class AdaptiveServer:
    """FedAdagrad, FedAdam and FedYogi (Reddi et al., 2021, Algorithm 2), one server step a round:

    - ``Δ_i = x_i - x_t`` for each client ``i`` of the round's set ``S``, ``Δ_t = (1/|S|) Σ_i Δ_i``
      (the paper's plain mean, not weighted by examples);
    - ``m_t = β1 m_{t-1} + (1 - β1) Δ_t``, with ``m_{-1} = 0``;
    - ``v_t`` by the optimizer (below), with ``v_{-1} = τ²`` (the paper asks ``v_{-1} ≥ τ²``);
    - ``x_{t+1} = x_t + η m_t / (√v_t + τ)``; no bias correction.

    ``v_t``: FedAdagrad ``v_{t-1} + Δ_t²``; FedAdam ``β2 v_{t-1} + (1 - β2) Δ_t²``;
    FedYogi ``v_{t-1} - (1 - β2) Δ_t² sign(v_{t-1} - Δ_t²)``.
    """

    def __init__(self, strategy: FedAdagradStrategy | FedAdamStrategy | FedYogiStrategy) -> None:
        self.strategy = strategy
        self.first_moment: Params | None = None
        self.second_moment: Params | None = None

    def _second_moment(self, previous: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """``v_t`` from ``v_{t-1}`` and ``Δ_t``, by the optimizer."""
        squared = delta * delta
        if isinstance(self.strategy, FedAdagradStrategy):
            return previous + squared
        one_minus_beta_2 = 1.0 - self.strategy.beta_2
        if isinstance(self.strategy, FedAdamStrategy):
            return self.strategy.beta_2 * previous + one_minus_beta_2 * squared
        return previous - one_minus_beta_2 * squared * np.sign(previous - squared)  # FedYogi

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """One adaptive server step along the clients' mean change ``Δ_t``."""
        beta_1, tau, eta = self.strategy.beta_1, self.strategy.tau, self.strategy.server_learning_rate
        deltas = [np.zeros_like(x) for x in global_params]
        for update in updates:
            for total, x_i, x in zip(deltas, update.params, global_params):
                total += x_i - x
        deltas = [total / len(updates) for total in deltas]
        if self.first_moment is None or self.second_moment is None:
            self.first_moment = [np.zeros_like(x) for x in global_params]
            self.second_moment = [np.full_like(x, tau * tau) for x in global_params]
        self.first_moment = [beta_1 * m + (1.0 - beta_1) * d for m, d in zip(self.first_moment, deltas)]
        self.second_moment = [self._second_moment(v, d) for v, d in zip(self.second_moment, deltas)]
        steps = [
            x + eta * m / (np.sqrt(v) + tau) for x, m, v in zip(global_params, self.first_moment, self.second_moment)
        ]
        return shaped_like(steps, global_params)


class ControlledAveraging:
    """SCAFFOLD's server (Karimireddy et al., 2020, Algorithm 1), with the global learning rate ``η_g``:

    ``(Δx, Δc) = (1/|S|) Σ_i (y_i - x, Δc_i)`` (plain means over the round's clients ``S``),
    ``x_{t+1} = x + η_g Δx``, ``c_{t+1} = c + (|S|/N) Δc`` with ``N`` clients in all; ``c`` starts at
    0 and goes to the clients with ``x`` (:meth:`control`).
    """

    def __init__(self, strategy: ScaffoldStrategy, num_clients: int) -> None:
        self.learning_rate, self.num_clients = strategy.server_learning_rate, num_clients
        self.variate: Params | None = None

    def control(self, global_params: Params) -> Params:
        """The server's control variate ``c`` the round's clients get."""
        if self.variate is None:
            self.variate = [np.zeros_like(x) for x in global_params]
        return self.variate

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """One step along the clients' mean change; ``c`` moves by ``|S|/N`` of their controls' mean change."""
        if any(update.control_delta is None for update in updates):
            raise ValueError("SCAFFOLD: a client update without its control variate's change")
        model_change = [np.zeros_like(x) for x in global_params]
        control_change = [np.zeros_like(x) for x in global_params]
        for update in updates:
            for total, y_i, x in zip(model_change, update.params, global_params):
                total += y_i - x
            for total, delta in zip(control_change, update.control_delta):
                total += delta
        selected = len(updates)
        self.variate = shaped_like(
            [
                c + (selected / self.num_clients) * (total / selected)
                for c, total in zip(self.control(global_params), control_change)
            ],
            global_params,
        )
        steps = [x + self.learning_rate * (total / selected) for x, total in zip(global_params, model_change)]
        return shaped_like(steps, global_params)


def server_update(strategy: StrategyConfig, num_clients: int, learning_rate: float | None = None) -> ServerUpdate:
    """The reference's server step for ``strategy`` over ``num_clients`` clients, with fresh state (q-FedAvg also
    needs the clients' ``learning_rate``)."""
    if isinstance(strategy, QFedAvgStrategy):
        if learning_rate is None:
            raise ValueError("q-FedAvg: the clients' learning rate is needed (L = 1 / learning_rate)")
        return QFairAveraging(strategy, learning_rate)
    if isinstance(strategy, ScaffoldStrategy):
        return ControlledAveraging(strategy, num_clients)
    if isinstance(strategy, FedAvgMStrategy):
        return ServerMomentum(strategy)
    if isinstance(strategy, FedAdagradStrategy | FedAdamStrategy | FedYogiStrategy):
        return AdaptiveServer(strategy)
    if isinstance(strategy, FedMedianStrategy):
        return CoordinateMedian()
    if isinstance(strategy, FedTrimmedAvgStrategy):
        return TrimmedMean(strategy)
    if isinstance(strategy, KrumStrategy):
        return KrumSelection(strategy)
    if isinstance(strategy, BulyanStrategy):
        return Bulyan(strategy)
    return WeightedAverage()
