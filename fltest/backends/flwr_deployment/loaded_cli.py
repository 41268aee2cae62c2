"""Flower's CLI imported before its command is known: ``python -m fltest.backends.flwr_deployment.loaded_cli``.

A ``flwr`` command takes 1.6 to 2 s here, most of it importing Flower's CLI. A run that has to wait
anyway (for its SuperLink to answer) starts this process first: it imports the CLI, reads the
command's arguments as one JSON list on its standard input, and runs them as the ``flwr``
executable would. An empty input (the command is no longer wanted) ends it with nothing done.
"""

from __future__ import annotations

import json
import sys

MODULE = "fltest.backends.flwr_deployment.loaded_cli"  # this module, as ``python -m`` runs it


def main() -> None:
    """Import Flower's CLI, then run the ``flwr`` arguments read from standard input."""
    from flwr.cli.app import app

    line = sys.stdin.readline()
    if not line.strip():
        return
    sys.argv = ["flwr", *json.loads(line)]
    sys.exit(app())


if __name__ == "__main__":
    main()
