"""Before a deployment run is submitted: are enough SuperNodes online?

A run whose SuperNodes are down would otherwise wait for them inside the ServerApp (up to a
round's timeout) and only then fail; the SuperLink already knows, so fltest asks it first.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fltest.backends.flwr_deployment.connection import CONNECTION, flwr_json
from fltest.errors import RunFailed

ONLINE = "online"


def check_online(flwr_home: Path, clients: int, timeout: float = 30.0) -> None:
    """Refuse the run with one line unless the SuperLink reports exactly ``clients`` SuperNodes online.

    Fewer: the line says how many are online and the status of the others (``offline``: no
    heartbeat, ``registered``: never connected, ``unregistered``: its key was removed). More:
    each SuperNode holds one partition of the experiment, so its ``clients`` must equal them.
    """
    nodes = flwr_json(flwr_home, "supernode", "list", CONNECTION, timeout=timeout)["nodes"]
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
