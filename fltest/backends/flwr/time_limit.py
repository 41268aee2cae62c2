"""Wait for a call at most a given time: a ClientApp's local training must not outlive its round.

A Flower simulation cannot end while a ClientApp still runs: its workers wait for every
reply before ``run_simulation`` returns. A client whose local training hangs (a user's hook
that never returns) would keep ``fltest run`` alive long after the server gave up on the
round. The ClientApp therefore trains in a daemon thread and gives up waiting once
``round_timeout_s`` has passed; the abandoned thread ends with its Ray worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimeLimitExceeded(Exception):
    """The call did not return within its time limit."""


def call_within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``'s result, or its exception; :class:`TimeLimitExceeded` if it runs past ``seconds``."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, raised there
            outcome["error"] = error

    thread = threading.Thread(target=target, name="fltest-local-training", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeLimitExceeded(f"local training did not finish within round_timeout_s ({seconds:g} s)")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]
