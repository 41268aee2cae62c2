"""The reference's q-FedAvg server step (Li, Sanjabi, Beirami and Smith, 2020, "Fair Resource Allocation in Federated
Learning", Algorithm 2), written from the paper.

Each client reports ``F_k(w_t)``, its loss on its own data under the round's global model before it trains
(:data:`fltest.fedavg.LOSS_BEFORE_TRAINING`, which :func:`fltest.fedavg.client_update` adds for this strategy). With
``L = 1 / learning_rate``:

``Δw_k = L (w_t - w_k)``, ``Δ_k = F_k^q Δw_k``, ``h_k = q F_k^(q-1) ‖Δw_k‖² + L F_k^q``,
``w_{t+1} = w_t - Σ_k Δ_k / Σ_k h_k``, summed over the round's clients in partition order, unweighted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fltest.config.strategies import QFedAvgStrategy
from fltest.fedavg import LOSS_BEFORE_TRAINING, ClientUpdate
from fltest.params import Params, shaped_like


class QFairAveraging:
    """q-FedAvg's server step (the module's docstring)."""

    def __init__(self, strategy: QFedAvgStrategy, learning_rate: float) -> None:
        self.q, self.lipschitz = strategy.q, 1.0 / learning_rate

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """One q-FedAvg step from the clients' models and their losses before training."""
        q, lipschitz = self.q, self.lipschitz
        deltas = [np.zeros_like(w, dtype=np.float64) for w in global_params]
        h_total = 0.0
        for update in updates:
            loss = update.metrics[LOSS_BEFORE_TRAINING]
            change = [lipschitz * (w - w_k) for w, w_k in zip(global_params, update.params)]
            squared_norm = sum(float(np.sum(c * c)) for c in change)
            for total, c in zip(deltas, change):
                total += loss**q * c
            h_total += q * loss ** (q - 1) * squared_norm + lipschitz * loss**q
        return shaped_like([w - d / h_total for w, d in zip(global_params, deltas)], global_params)
