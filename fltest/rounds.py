"""What a backend hands the runner: one :class:`RoundResult` a round, through a :class:`RunProgress`.

Backends only carry the experiment through a framework. The runner's :class:`RunProgress`
evaluates each round's global model, calls the hooks' metrics and writes the results, the same
way for every backend. (Frameworks run their rounds in threads or processes of their own, so a
backend reports rounds as they end rather than returning them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fltest.hooks import Metrics
from fltest.params import Params


@dataclass(frozen=True)
class RoundPrivacy:
    """What a private round (``training.privacy``) released: the clipping norm its clients' changes were clipped to,
    the noise's standard deviation (measured on what was sent, ``None`` where it cannot be seen: a Flower client's
    own; and by the mechanism's formula with the values the framework used), and the privacy spent so far (ε at
    ``delta``; ``None`` without noise, or where the framework has no accountant)."""

    clipping_norm: float
    noise_std: float | None
    noise_std_expected: float
    epsilon: float | None
    delta: float


@dataclass(frozen=True)
class RoundResult:
    """One finished round: the new global model, the partitions that trained, their averaged metrics; and, where the
    framework timed the round itself, how long it took (``round_s``)."""

    server_round: int
    params: Params
    train_metrics: Metrics
    clients: list[int]
    # Set where fltest learns of a round later than it ends: a Flower ServerApp's lines reach fltest through Flower's
    # log, uploaded every 0.2 s and streamed every 0.5 s. None: fltest times the round as its result arrives.
    round_s: float | None = None
    privacy: RoundPrivacy | None = None  # a private run's round (``training.privacy``)


class RunProgress(Protocol):
    """Where a backend reports its run as it goes."""

    def setup_done(self) -> None:
        """The framework is up: the time so far is set-up, not round 1."""

    def round_done(self, result: RoundResult) -> None:
        """Round ``result.server_round`` (1, 2, ... in order) has ended."""

    def note(self, **info: Any) -> None:
        """Facts about the run for its summary (the machines clients trained on, a run id, ...)."""
