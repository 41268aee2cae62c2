"""A client error from Flower's Ray backend as one line that names the Ray node (machine) and the cause.

Flower's simulation wraps an exception raised while a client ran as ``<class 'T'>:<'message'>``.
When ``T`` is a Ray actor error, the message names the actor's node only by IP (``ip: 10.0.0.3``)
or not at all. :func:`remember_node_names`, called when the driver joins the cluster, notes each
node's name on the network (reverse DNS: a container's name under Docker, a host name in a lab),
since a container cut off its network or stopped vanishes from Docker's DNS; the driver hands those
names to the ServerApp (:func:`note_node_names`). The Ray node list, asked when the error comes,
says whether that node is still alive.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

#: Flower's wrapper around an exception raised in its simulation backend (vce_api.worker).
WRAPPED = re.compile(r"<class '(?P<type>[\w.]+(?:\(\w+\))?)'>:<'(?P<message>.*)'>", re.S)
#: Ray's wrapper of an exception raised inside a task, e.g. ``ray.exceptions.RayTaskError(ClientAppException)``.
TASK_ERROR = "ray.exceptions.RayTaskError("
#: What Flower puts before a ClientApp exception's own message.
CLIENT_APP_EXCEPTION = "Exception ClientAppException occurred. Message: "
ACTOR_ID = re.compile(r"(?:actor_id: |The actor )(?P<id>[0-9a-f]{16,})")
NODE_DEATH = ("node has died", "node was terminated", "node died", "node is dead")
#: Ray's error when an actor's process cannot be reached (its node killed a moment ago, before Ray declares it dead).
UNREACHABLE = "ActorUnavailableError"

NodeInfo = Callable[[str], "tuple[str, bool] | None"]  # ip -> (node name, alive)


_NAMES: dict[str, str] = {}  # node IP -> its name on the network, noted while every node was reachable


def _network_name(ip: str) -> str | None:
    """The short name reverse DNS gives ``ip`` (``fltest_ray-worker_1`` from ``fltest_ray-worker_1.fltest_cluster``)."""
    try:
        name = socket.gethostbyaddr(ip)[0]
    except OSError:
        return None
    return name if name == ip else name.split(".")[0]


def remember_node_names() -> dict[str, str]:
    """Note the network name of every live node of the joined cluster; returns ``{ip: name}``."""
    import ray

    for node in ray.nodes():
        ip = node.get("NodeManagerAddress")
        if node.get("Alive") and ip and ip not in _NAMES:
            name = _network_name(ip)
            if name:
                _NAMES[ip] = name
    return dict(_NAMES)


def note_node_names(names: dict[str, str]) -> None:
    """Note ``names`` (``{ip: name}``, from :func:`remember_node_names` in another process, the driver)."""
    _NAMES.update(names)


def ray_node_info(ip: str) -> tuple[str, bool] | None:
    """The Ray node at ``ip``: its noted network name (else its hostname) and whether Ray lists it alive."""
    import ray

    if not ray.is_initialized():
        return None
    try:
        nodes = [n for n in ray.nodes() if n.get("NodeManagerAddress") == ip]
    except Exception:  # the driver lost the cluster too: say what the error says
        return None
    if not nodes:
        return None
    node = max(nodes, key=lambda n: n.get("Alive", False))  # a restarted node may be listed twice
    return _NAMES.get(ip) or node.get("NodeManagerHostname") or ip, bool(node.get("Alive"))


def _actor_ip(message: str) -> str | None:
    """The IP of the node an actor ran on: the error's ``ip:`` line, else Ray's actor table."""
    for line in message.splitlines():
        if line.strip().startswith("ip:"):
            return line.split(":", 1)[1].strip()
    match = ACTOR_ID.search(message)
    if not match:
        return None
    try:
        import ray

        if not ray.is_initialized():
            return None
        entry = ray._private.state.state.actor_table(match["id"])  # no public API without the dashboard
        return (entry or {}).get("Address", {}).get("IPAddress") or None
    except Exception:
        return None


def describe_wrapped_error(reason: str, node_info: NodeInfo = ray_node_info) -> str | None:
    """One line for a Flower-wrapped client error, or ``None`` when ``reason`` is not wrapped.

    A Ray actor error reads ``Ray node <name> (<ip>) died (ActorDiedError)`` when Ray lists
    that node dead or the error says its node died, ``Ray node <name> (<ip>) became unreachable:
    ...`` for an actor Ray cannot reach, else ``Ray node <name> (<ip>): <first line> (<type>)``; any other exception reads as its message's last line (the exception
    itself), without Flower's wrapper.
    """
    match = WRAPPED.fullmatch(reason.strip())
    if not match:
        return None
    kind = match["type"].rsplit(".", 1)[-1]
    message = match["message"]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not match["type"].startswith("ray.") or match["type"].startswith(TASK_ERROR):  # the client's own exception
        return lines[-1].removeprefix(CLIENT_APP_EXCEPTION) if lines else kind
    ip = _actor_ip(message)
    info = node_info(ip) if ip else None
    where = f"Ray node {info[0]} ({ip})" if info else (f"Ray node {ip}" if ip else "its Ray node")
    died = (info is not None and not info[1]) or any(phrase in message for phrase in NODE_DEATH)
    if died:
        return f"{where} died ({kind})"
    if kind == UNREACHABLE:
        return f"{where} became unreachable: stopped, or cut off from the driver ({kind})"
    return f"{where}: {lines[0] if lines else 'no message'} ({kind})"
