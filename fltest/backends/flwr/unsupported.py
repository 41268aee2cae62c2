"""Which of FLTest's strategies Flower 1.42 has no implementation of, known without importing Flower.

A deployment's driver only submits the App and follows its log: it asks this before a run and need
not import Flower for it (0.7 s of its start, measured in the kit's container).
"""

from __future__ import annotations

from fltest.config.strategies import ScaffoldStrategy, StrategyConfig

NO_SCAFFOLD = (
    "Flower 1.42 has no SCAFFOLD: neither flwr.serverapp.strategy nor the older flwr.server.strategy has one, "
    "and its strategies keep no control variates"
)


def unsupported(strategy: StrategyConfig) -> str | None:
    """Why Flower 1.42 has no implementation of ``strategy`` of its own, else ``None``."""
    return NO_SCAFFOLD if isinstance(strategy, ScaffoldStrategy) else None
