"""The host's network, as tests that open or probe ports see it."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def host_addresses() -> list[str]:
    """The host's IPv4 addresses other than loopback (its interfaces, Docker's bridges too)."""
    output = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout
    return [a for a in output.split() if "." in a and not a.startswith("127.")]
