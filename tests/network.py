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
    """The host's IPv4 addresses other than loopback (its interfaces, Docker's bridges too): at least one.

    Tests probe each for a listener that must not be there; with none listed a probe loop would
    check nothing, so a ``hostname -I`` that fails or lists none fails the test instead.
    """
    listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True)
    addresses = [a for a in listed.stdout.split() if "." in a and not a.startswith("127.")]
    assert addresses, (
        f"hostname -I (exit {listed.returncode}) lists no IPv4 address but loopback: {listed.stdout + listed.stderr!r}"
    )
    return addresses
