"""A container healthcheck: the node's Ray ports accept connections, and a worker reaches its head (standard library only).

``python -m deploy.node.healthcheck node_manager object_manager --head ray-head`` exits 0 when
every port listed (a number, or a name of :data:`deploy.node.ray_start.PORTS`) accepts a TCP
connection on this node's address and, with ``--head`` (``<host>`` or ``<host>:<port>``; the
port defaults to the kit's GCS port), the head's GCS accepts one too (a worker cut off from the head is no member of the cluster); 1 with one
line naming what failed otherwise.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence

from deploy.node.ray_start import PORTS


def closed_ports(host: str, ports: Sequence[int], timeout_s: float = 2.0) -> list[int]:
    """The ports among ``ports`` on ``host`` that refuse a TCP connection."""
    closed = []
    for port in ports:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                pass
        except OSError:
            closed.append(port)
    return closed


def port_number(port: str) -> int:
    """A port given as a number or as a name of :data:`PORTS` (``gcs``, ``node_manager``, ...)."""
    return int(port) if port.isdigit() else PORTS[port]


def head_unreachable(address: str, timeout_s: float = 2.0) -> str | None:
    """Why the head at ``<host>[:<port>]`` (default port: the GCS's) cannot be reached (one phrase), or ``None``."""
    host, _, port = address.rpartition(":") if ":" in address else (address, ":", str(PORTS["gcs"]))
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"head {host}:{port} unreachable ({exc.strerror or exc})"


def main(argv: Sequence[str] | None = None) -> None:
    """Check the ports given on the command line against this node's own address, and the head if given."""
    parser = argparse.ArgumentParser(prog="python -m deploy.node.healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument(
        "ports",
        nargs="+",
        type=port_number,
        help=f"this node's ports that must accept connections: numbers or names ({', '.join(PORTS)})",
    )
    parser.add_argument(
        "--head", help="a worker's head, <host>[:<port>] (default port: the GCS's): must accept a connection too"
    )
    args = parser.parse_args(argv)
    host = socket.gethostbyname(socket.gethostname())
    problems = []
    closed = closed_ports(host, args.ports)
    if closed:
        problems.append(f"not listening on {host}: port(s) {', '.join(map(str, closed))}")
    if args.head and (unreachable := head_unreachable(args.head)):
        problems.append(unreachable)
    if problems:
        sys.exit("; ".join(problems))


if __name__ == "__main__":
    main()
