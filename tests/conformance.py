"""The conformance check every backend's tests share: per-round global models against the reference's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fltest.params import load_params

# The stated tolerance: a backend's global model after each round equals the reference
# backend's within this absolute difference (backends sum client updates in partition
# order, as the reference does, so in practice the difference is 0).
TOLERANCE = 1e-9


def max_difference(experiment_dir: Path, run: str, rounds: int, reference: str = "reference") -> float:
    """The largest absolute parameter difference between ``run`` and ``reference`` over rounds 0..rounds."""
    worst = 0.0
    for r in range(rounds + 1):
        ours = load_params(experiment_dir / run / "models" / f"round-{r:04d}.npz")
        theirs = load_params(experiment_dir / reference / "models" / f"round-{r:04d}.npz")
        worst = max(worst, *(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs, strict=True)))
    return worst


def assert_conforms(experiment_dir: Path, run: str, rounds: int) -> None:
    """Fail unless ``run`` matches the reference run within :data:`TOLERANCE` after every round."""
    difference = max_difference(experiment_dir, run, rounds)
    assert difference <= TOLERANCE, f"{run} differs from the reference by {difference:g} (> {TOLERANCE:g})"
