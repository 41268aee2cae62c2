"""``python -m deploy.node.superlink_flwr <flwr args>``: the operator's ``flwr`` command, next to the SuperLink.

Flower 1.42's SuperLink serves Fleet, Control and its Runtime API on one HTTPS port; the kit
starts it on 127.0.0.1 of its own network namespace only (compose/flower.yml, the Ansible role
fltest_superlink). The operator's tools therefore run ``flwr`` there: inside the SuperLink's container
(``docker exec <superlink> python -m deploy.node.superlink_flwr ...``: ``fltest-flower list/register/
unregister`` and the Ansible roles alike), or in a one-off container of its namespace (``fltest-flower
flwr``, ansible/flwr.yml), with the CA at :data:`CA_MOUNT`. This writes the connection ``fltest`` (the
default: the SuperLink at :data:`SUPERLINK_ADDRESS`, its CA at :data:`CA_MOUNT`) into a private temporary
FLWR_HOME, runs ``flwr`` in the current folder and exits with its code; its output is flwr's own. When
``FLTEST_PUBLIC_KEY`` is set, that key is written as ``node.pub`` into the private folder, where flwr then
runs (``flwr supernode register node.pub ...``). Nothing stays behind.

Before ``flwr run`` submits a local App, its ``[project] dependencies`` are checked against this
environment, the image the SuperNodes run (:mod:`deploy.node.app_dependencies`): one missing is one line
and exit 2. SIGINT (Ctrl-C, or ``docker kill --signal INT``, which the container's init hands to this
process alone) goes on to flwr, which stops following a streamed run (the run goes on: whoever stops the
command stops the run, ``flwr stop``); then exit 130.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.kit import KIT
from deploy.node.app_dependencies import app_folder, check_app
from fltest.backends.flwr_deployment.connection import connection_toml, flwr_cli
from fltest.exit_codes import ExitCode

SUPERLINK_PORT = (
    KIT.superlink_port
)  # the SuperLink's one HTTPS API, on 127.0.0.1 of its namespace (flower.yml, fleet_proxy.conf)
SUPERLINK_ADDRESS = f"127.0.0.1:{SUPERLINK_PORT}"  # a deployment run's `superlink` next to the SuperLink
TLS_MOUNT = "/run/secrets/tls"  # the SuperLink's TLS folder in its container (and the Fleet proxy's)
CA_MOUNT = f"{TLS_MOUNT}/ca.crt"
PUBLIC_KEY_ENV = "FLTEST_PUBLIC_KEY"
PUBLIC_KEY_FILE = "node.pub"  # `flwr supernode register node.pub ...` reads the key from here
IMAGE_ENV = "FLTEST_IMAGE"  # the image this runs in, as the refusal of an App names it


def run_flwr(args: list[str], address: str = SUPERLINK_ADDRESS, ca: str = CA_MOUNT) -> int:
    """Run ``flwr <args>`` against the SuperLink at ``address`` (CA file ``ca``) from a private FLWR_HOME; its exit code."""
    folder = app_folder(args)
    refusal = check_app(folder, os.environ.get(IMAGE_ENV, "")) if folder is not None else None
    if refusal:
        print(refusal, file=sys.stderr)
        return ExitCode.BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="flwr-home-") as home:
        (Path(home) / "config.toml").write_text(connection_toml(address, ca))
        public_key = os.environ.get(PUBLIC_KEY_ENV, "")
        if public_key:
            (Path(home) / PUBLIC_KEY_FILE).write_text(public_key)
        flwr = subprocess.Popen(
            [flwr_cli(), *args], cwd=home if public_key else None, env={**os.environ, "FLWR_HOME": home}
        )
        try:
            return flwr.wait()
        except KeyboardInterrupt:
            if flwr.poll() is None:
                flwr.send_signal(signal.SIGINT)  # flwr's own Ctrl-C: it stops following the run, and exits
            flwr.wait()
            return ExitCode.INTERRUPTED


def main() -> None:
    """The command line: every argument goes to ``flwr``."""
    sys.exit(run_flwr(sys.argv[1:]))


if __name__ == "__main__":
    main()
