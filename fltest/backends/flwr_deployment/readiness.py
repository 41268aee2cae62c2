"""While a deployment run is submitted: are enough SuperNodes online?

A run whose SuperNodes are down would otherwise wait for them inside the ServerApp (up to a
round's timeout) and only then fail; the SuperLink already knows, so fltest asks it. It asks
while it submits the run (each ``flwr`` command starts a Python of its own, 1 to 2 s, which would
otherwise come before round 1 of every run); a run refused so is stopped before its ServerApp sends
any message: the ServerApp waits for as many nodes as the experiment has clients before it sends
one, and one more node fails it at once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fltest.backends.flwr_deployment.connection import CONNECTION, FlwrCall
from fltest.errors import RunFailed

ONLINE = "online"
ASK_TIMEOUT_S = 30.0


def ask_nodes(flwr_home: Path) -> FlwrCall:
    """Ask the SuperLink for its SuperNodes (``flwr supernode list``), in the background."""
    return FlwrCall(flwr_home, "supernode", "list", CONNECTION, timeout=ASK_TIMEOUT_S)


def check_online(nodes: list[dict], clients: int) -> None:
    """Refuse the run with one line unless ``nodes`` (the SuperLink's list) has exactly ``clients`` online.

    Fewer: the line says how many are online and the status of the others (``offline``: no
    heartbeat, ``registered``: never connected, ``unregistered``: its key was removed). More:
    each SuperNode holds one partition of the experiment, so its ``clients`` must equal them.
    """
    statuses = Counter(str(node.get("status", "unknown")) for node in nodes)
    online = statuses.pop(ONLINE, 0)
    if online == clients:
        return
    if online > clients:
        raise RunFailed(
            f"{online} SuperNodes online, but the experiment has clients: {clients} (it must equal the number of SuperNodes)"
        )
    others = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items())) or "no other registered"
    raise RunFailed(
        f"{online} of {clients} SuperNodes online ({others}): start them, or check their logs, then run again"
    )
