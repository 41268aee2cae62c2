"""Clients that share only part of their change, the reference's way (the config: :mod:`fltest.config.privacy`).

Selective parameter sharing (Shokri and Shmatikov, 2015, "Privacy-Preserving Deep Learning"): each client shares
only the largest coordinates of its change ``Δ_k = w_k - w_t``: those whose magnitude is at
least the ``percentile``-th percentile of all its change's magnitudes (numpy's linear interpolation), each bounded
to ``[-γ, γ]``; the rest is shared as 0. A 0-d parameter (a counter) is shared as it is. Excluded parameters: each
client shares no change of the parameters named, so their global values stay.

The server adds the shared changes' average, weighted by examples, to the global model:
``w_{t+1} = w_t + Σ_k (n_k / n) share(Δ_k)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fltest.config.privacy import ExcludedParameters, PercentileSharing, SharedChanges
from fltest.errors import FieldError
from fltest.fedavg import ClientUpdate, aggregate
from fltest.params import Params, shaped_like


def shared_change(change: Params, percentile: float, gamma: float) -> Params:
    """What a client shares of ``change``: its coordinates of magnitude at least the ``percentile``-th percentile,
    bounded to ``[-gamma, gamma]``, and 0 elsewhere."""
    magnitudes = np.concatenate([np.abs(np.ravel(d)) for d in change])
    cutoff = np.percentile(magnitudes, percentile)
    return [
        d
        if np.ndim(d) == 0
        else np.clip(np.where(np.abs(d) < cutoff, 0.0, d), -gamma, gamma).astype(np.asarray(d).dtype)
        for d in change
    ]


def shared_part(sharing: SharedChanges, change: Params) -> Params:
    """What a client shares of ``change`` under ``sharing``."""
    if isinstance(sharing, PercentileSharing):
        return shared_change(change, sharing.percentile, sharing.gamma)
    return [np.zeros_like(d) if i in sharing.parameters else d for i, d in enumerate(change)]


def check_withheld(sharing: ExcludedParameters, params: Params) -> None:
    """Refuse a withheld position that is not one of ``params``' (one line naming the field)."""
    strangers = [p for p in sharing.parameters if p >= len(params)]
    if strangers:
        raise FieldError(
            f"training.privacy.parameters: {strangers[0]} is not a parameter of the model, which has "
            f"{len(params)} (0..{len(params) - 1})"
        )


class SharedChangesAveraging:
    """The server of clients that share part of their change: the global model plus the shared parts' weighted
    average."""

    def __init__(self, sharing: SharedChanges) -> None:
        self.sharing = sharing

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """``w_t + Σ_k (n_k / n) share(w_k - w_t)``, summed in the updates' order."""
        shared = [
            ClientUpdate(
                update.partition_id,
                shared_part(
                    self.sharing, [np.subtract(w, g) for w, g in zip(update.params, global_params, strict=True)]
                ),
                update.num_examples,
            )
            for update in updates
        ]
        average = aggregate(shared)[0]
        return shaped_like([g + a for g, a in zip(global_params, average)], global_params)
