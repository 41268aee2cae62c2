"""Every wait of a run, derived from ``training.round_timeout_s`` in one place.

- A client gives up its local training after ``round_timeout_s`` (and says so).
- Whoever waits for a round's replies (Flower's server, in both modes) waits ``reply_grace_s``
  longer, so that a client that gave up is heard saying why, not taken for a missing reply.
- Before round 1 a framework gets ``startup_s`` more to start its processes and find its clients.
- The driver (fltest following a run) waits another ``reply_grace_s`` for each round's result, so
  that the framework's own failure line, which names the client, arrives before the driver's.
"""

from __future__ import annotations

from dataclasses import dataclass

from fltest.config.schema import ExperimentConfig

# Allowed for a framework to start (its processes, Ray actors, the simulator's clients, a submitted
# Flower run) and find its clients, on top of the first round's own deadline: on a loaded 2-core
# machine, Ray actors on a busy cluster took more than 30 s to answer their first message.
STARTUP_S = 120.0
# How much longer than a client's round_timeout_s a server waits for a round's replies.
REPLY_GRACE_S = 10.0


@dataclass(frozen=True)
class Deadlines:
    """The deadlines of one run, in seconds."""

    round_timeout_s: float
    startup_s: float = STARTUP_S
    reply_grace_s: float = REPLY_GRACE_S

    @classmethod
    def of(cls, config: ExperimentConfig) -> Deadlines:
        """The deadlines of ``config``'s runs."""
        return cls(round_timeout_s=config.training.round_timeout_s)

    @property
    def local_training_s(self) -> float:
        """How long a client's local training may take before the client answers with an error."""
        return self.round_timeout_s

    @property
    def replies_s(self) -> float:
        """How long a server waits for a round's replies."""
        return self.round_timeout_s + self.reply_grace_s

    @property
    def discovery_s(self) -> float:
        """How long a server waits for its clients to come up and answer before round 1."""
        return self.startup_s + self.round_timeout_s

    def round_result_s(self, server_round: int) -> float:
        """How long the driver waits for round ``server_round``'s result after the previous one (or the start)."""
        return self.replies_s + self.reply_grace_s + (self.startup_s if server_round == 1 else 0.0)

    def describe_round_result_s(self, server_round: int) -> str:
        """:meth:`round_result_s` as a failure line says it, with where it comes from."""
        startup = f" + {self.startup_s:g} s start-up" if server_round == 1 else ""
        return (
            f"{self.round_result_s(server_round):g} s (round_timeout_s {self.round_timeout_s:g} s"
            f" + 2 x {self.reply_grace_s:g} s reply grace{startup})"
        )
