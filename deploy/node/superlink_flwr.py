"""``python -m deploy.node.superlink_flwr <flwr args>``: the operator's ``flwr`` command, run inside the SuperLink's container.

Flower 1.42's SuperLink serves Fleet, Control and its Runtime API on one HTTPS port; the kit
starts it on 127.0.0.1 of its own network namespace only (compose/flower.yml, the Ansible role
fltest_superlink). The operator's tools therefore run ``flwr`` in the SuperLink's container, with
``docker exec <superlink> python -m deploy.node.superlink_flwr ...``: ``fltest-flower list/register/
unregister`` and the Ansible roles alike. This writes the connection ``fltest`` (the SuperLink at
:data:`SUPERLINK_ADDRESS`, its CA at :data:`CA_MOUNT`) and, when ``FLTEST_PUBLIC_KEY`` is set,
that key as ``node.pub`` into a private temporary FLWR_HOME that is also the working folder, runs
``flwr`` there and exits with its code; its output is flwr's own. Nothing stays behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.kit import KIT
from fltest.backends.flwr_deployment.connection import connection_toml, flwr_cli

SUPERLINK_PORT = KIT.superlink_port  # the SuperLink's one HTTPS API, on 127.0.0.1 of its namespace (flower.yml, fleet_proxy.conf)
SUPERLINK_ADDRESS = f"127.0.0.1:{SUPERLINK_PORT}"  # a deployment run's `superlink` next to the SuperLink
TLS_MOUNT = "/run/secrets/tls"  # the SuperLink's TLS folder in its container (and the Fleet proxy's)
CA_MOUNT = f"{TLS_MOUNT}/ca.crt"
PUBLIC_KEY_ENV = "FLTEST_PUBLIC_KEY"
PUBLIC_KEY_FILE = "node.pub"  # `flwr supernode register node.pub ...` reads the key from here


def run_flwr(args: list[str]) -> int:
    """Run ``flwr <args>`` against the SuperLink from a private FLWR_HOME; its exit code."""
    with tempfile.TemporaryDirectory(prefix="flwr-home-") as home:
        (Path(home) / "config.toml").write_text(connection_toml(SUPERLINK_ADDRESS, CA_MOUNT))
        public_key = os.environ.get(PUBLIC_KEY_ENV, "")
        if public_key:
            (Path(home) / PUBLIC_KEY_FILE).write_text(public_key)
        return subprocess.run([flwr_cli(), *args], cwd=home, env={**os.environ, "FLWR_HOME": home}).returncode


def main() -> None:
    """The command line: every argument goes to ``flwr``."""
    sys.exit(run_flwr(sys.argv[1:]))


if __name__ == "__main__":
    main()
