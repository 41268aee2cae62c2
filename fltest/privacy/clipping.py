"""A client's change clipped to an L2 norm ("FlatClip": every parameter of the model as one vector)."""

from __future__ import annotations

import numpy as np

from fltest.params import Params, shaped_like


def update_norm(change: Params) -> float:
    """The L2 norm of ``change``'s arrays taken together: the root of the sum of each array's squared norm."""
    return float(np.sqrt(sum(float(np.linalg.norm(np.ravel(array))) ** 2 for array in change)))


def clip_to_norm(global_params: Params, params: Params, clipping_norm: float) -> tuple[Params, bool]:
    """``w_t + Δ·min(1, C/‖Δ‖)`` for ``Δ = params - global_params``, and whether it was clipped (``‖Δ‖ > C``)."""
    change = [np.subtract(p, w) for p, w in zip(params, global_params, strict=True)]
    norm = update_norm(change)
    clipped = norm > clipping_norm
    scale = clipping_norm / norm if clipped else 1.0
    return shaped_like([w + d * scale for w, d in zip(global_params, change)], global_params), clipped
