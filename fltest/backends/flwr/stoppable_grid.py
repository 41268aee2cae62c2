"""A Grid whose waits end as soon as the run is stopped (Ctrl-C), not at the round's timeout.

Flower's simulation runs the ServerApp in a thread of its own that is not a daemon: after a
Ctrl-C in the main thread it would keep waiting for replies that never come (up to
``round_timeout_s`` a round) and keep the process alive. The ServerApp gets this grid instead:
once ``stop`` is set, ``send_and_receive`` raises :class:`RunStopped`, which the ServerApp's main
catches to return at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore.run import Run

# Flower's in-memory grid pulls every 0.1 s, so a round's time is its work rounded up to the next 0.1 s:
# a few milliseconds more work cost a whole 0.1 s (bench/bare_apps.py, 10 clients: 0.204 s a round against a
# bare app's 0.104 s). Pulling every 0.01 s, a round ends within 0.01 s of its last reply; a pull of the
# in-memory LinkState under its lock (no network), small beside the clients' training (measured in the bench).
PULL_INTERVAL_S = 0.01


class RunStopped(Exception):
    """The run was stopped while the ServerApp waited for replies."""


class StoppableGrid(Grid):
    """``grid``, with a ``send_and_receive`` that gives up when ``stop`` is set."""

    def __init__(self, grid: Grid, stop: threading.Event) -> None:
        self._grid = grid
        self._stop = stop

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
        """Push ``messages`` and pull their replies until all came, ``timeout`` passed, or the run stopped."""
        waiting = set(self.push_messages(messages))
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while True:
            pulled = list(self.pull_messages(waiting))
            replies.extend(pulled)
            waiting.difference_update(reply.metadata.reply_to_message_id for reply in pulled)
            if not waiting or (deadline is not None and time.monotonic() >= deadline):
                return replies
            if self._stop.wait(PULL_INTERVAL_S):
                raise RunStopped
