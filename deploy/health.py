"""A container healthcheck: the node's Ray ports accept connections (standard library only).

``python -m deploy.health 6379 6380`` exits 0 when every port listed accepts a TCP
connection on this node's address, 1 (naming the port) otherwise.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence


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


def main(argv: Sequence[str] | None = None) -> None:
    """Check the ports given on the command line against this node's own address."""
    ports = [int(p) for p in (sys.argv[1:] if argv is None else argv)]
    host = socket.gethostbyname(socket.gethostname())
    closed = closed_ports(host, ports)
    if closed:
        sys.exit(f"not listening on {host}: port(s) {', '.join(map(str, closed))}")


if __name__ == "__main__":
    main()
