"""Start the NVFlare simulator's own command line with one start-up race of NVFlare 2.9 closed.

``python -m fltest.backends.nvflare.launch_simulator <job> -w ... -n ... -t ...`` runs
``nvflare.private.fed.app.simulator.simulator`` as its ``__main__``, after one change.

The race: the simulator starts its clients' workers from several threads at once. Each thread
picks a port for its worker with ``nvflare.fuel.utils.network_utils.get_open_ports``, which
binds a socket *and listens on it* before closing it, then forks the worker and connects to that
port as soon as it can. A worker forked by another thread in that instant inherits the listening
socket until it execs: the connect lands on it and is reset when it closes ("Communication error
with client site-N: [Errno 104] Connection reset by peer"). That client's thread then ends, its
worker never starts, and the first round waits for it until fltest's round timeout. Seen in CI,
and reproduced here with 4 threads under load: 25 of 400 connects landed on such a socket.
``tests/test_nvflare.py`` checks that the ports' sockets take no connection while they are chosen.

The change: the simulator runner picks ports with :func:`bound_ports`, which binds but never
listens. A socket that does not listen cannot take a connection, inherited or not; the connect
is refused and NVFlare tries again a second later, when the worker is listening.
"""

from __future__ import annotations

import runpy
import socket
import sys

SIMULATOR_MODULE = "nvflare.private.fed.app.simulator.simulator"


def bound_ports(number: int) -> list[int]:
    """``number`` distinct free TCP ports, each found by binding a socket that never listens.

    All sockets stay bound until every port is chosen (so no two are the same), then close.
    ``SO_REUSEADDR`` lets the worker's own listener bind its port even while a copy of the
    probing socket lingers in a process that has forked but not yet exec'd.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(number):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(probe)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("", 0))
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def install() -> None:
    """Make the NVFlare simulator runner pick its workers' ports with :func:`bound_ports`."""
    from nvflare.private.fed.app.simulator import simulator_runner

    simulator_runner.get_open_ports = bound_ports


def main() -> None:
    """Run the NVFlare simulator's command line (``sys.argv[1:]``) with :func:`install` done."""
    install()
    sys.argv = [SIMULATOR_MODULE, *sys.argv[1:]]
    runpy.run_module(SIMULATOR_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
