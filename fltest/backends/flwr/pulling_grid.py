"""A Grid that pulls a round's replies at FLTest's pace.

Flower's grids wait between pulls for replies: the simulation's in-memory grid 0.1 s, the
deployment's grid 3 s (``time.sleep(3)`` in ``flwr.superlink.grid.http_grid``). A round then ends
up to a whole wait after its last reply, and FLTest's table would time Flower's wait rather than
Flower's work. The ServerApp gets this grid instead, pulling every ``pull_interval_s``. (Its process, ``flwr-serverapp``
or ``flwr-simulation``, is ended by ``flwr stop``: nothing here waits for a stop.)
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore.run import Run

# The simulation's in-memory grid pulled every 0.1 s, so a round's time was its work rounded up to the next 0.1 s:
# a few milliseconds more work cost a whole 0.1 s (bench/bare_apps.py, 10 clients: 0.204 s a round against a
# bare app's 0.104 s). Pulling every 0.01 s, a round ends within 0.01 s of its last reply; a pull of the
# in-memory LinkState under its lock (no network), small beside the clients' training (measured in the bench).
SIMULATION_PULL_INTERVAL_S = 0.01
# A deployment's pull is one gRPC call to the SuperLink: ten a second while a round is out, against Flower's
# one every 3 s, which left a round ending up to 3 s after its last reply (bench/bare_apps.py, flower-deployment).
DEPLOYMENT_PULL_INTERVAL_S = 0.1


class PullingGrid(Grid):
    """``grid``, with a ``send_and_receive`` that pulls every ``pull_interval_s``."""

    def __init__(self, grid: Grid, pull_interval_s: float) -> None:
        self._grid = grid
        self._pull_interval_s = pull_interval_s
        self._allowance_s = 0.0

    def allow_once(self, extra_s: float) -> None:
        """The next ``send_and_receive`` waits ``extra_s`` longer than its timeout (the clients' start-up)."""
        self._allowance_s = extra_s

    def set_run(self, run: Run) -> None:
        """Flower's ``set_run`` of the wrapped grid."""
        self._grid.set_run(run)

    @property
    def run(self) -> Run:
        """The wrapped grid's run."""
        return self._grid.run

    def create_message(self, *args, **kwargs) -> Message:
        """Flower's ``create_message`` of the wrapped grid."""
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        """The node ids of the wrapped grid."""
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push through the wrapped grid."""
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull through the wrapped grid."""
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push ``messages`` and pull their replies until all came or ``timeout`` passed."""
        waiting = set(self.push_messages(messages))
        deadline = None if timeout is None else time.monotonic() + timeout + self._allowance_s
        self._allowance_s = 0.0
        replies: list[Message] = []
        while True:
            pulled = list(self.pull_messages(waiting))
            replies.extend(pulled)
            waiting.difference_update(reply.metadata.reply_to_message_id for reply in pulled)
            if not waiting or (deadline is not None and time.monotonic() >= deadline):
                return replies
            time.sleep(self._pull_interval_s)
