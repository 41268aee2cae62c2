"""What FLTest's command lines share: parse, run the chosen handler, report an error as one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from fltest.errors import FLTestError

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


def run_command(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    setup: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse ``argv``, call ``setup`` then the subcommand's ``handler``; returns its exit code.

    An :class:`FLTestError` prints ``<prog>: error: <message>`` on stderr and returns the
    error's exit code (2 for bad input, 1 for a failure); Ctrl-C prints ``<prog>: interrupted``
    and returns 130, the shell's code for SIGINT.
    """
    args = parser.parse_args(argv)
    if setup is not None:
        setup(args)
    try:
        return args.handler(args)
    except FLTestError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C: what was recorded stays, with its summary saying so
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
