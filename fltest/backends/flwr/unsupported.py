"""Which of FLTest's strategies and privacy mechanisms Flower 1.42 has no implementation of, known without importing
Flower.

A deployment's driver only submits the App and follows its log: it asks this before a run and need
not import Flower for it (0.7 s of its start, measured in the kit's container).
"""

from __future__ import annotations

from fltest.config.privacy import SharedChanges
from fltest.config.schema import TrainingConfig
from fltest.config.strategies import ScaffoldStrategy

NO_SCAFFOLD = (
    "Flower 1.42 has no SCAFFOLD: neither flwr.serverapp.strategy nor the older flwr.server.strategy has one, "
    "and its strategies keep no control variates"
)

NO_SHARING = (
    "Flower 1.42 has no {mechanism}: no mod of flwr.clientapp.mod shares part of a client's change (its privacy "
    "mods clip the change's norm or noise it), and its strategies aggregate every array of every reply"
)


def unsupported(training: TrainingConfig) -> str | None:
    """Why Flower 1.42 has no implementation of ``training``'s strategy or privacy mechanism of its own, else
    ``None``."""
    if isinstance(training.privacy, SharedChanges):
        return NO_SHARING.format(mechanism=training.privacy.mechanism)
    return NO_SCAFFOLD if isinstance(training.strategy, ScaffoldStrategy) else None
