"""What FLTest's command lines share: parse, run the chosen handler, report an error as one line."""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from fltest.errors import FLTestError
from fltest.exit_codes import ExitCode
from fltest.interrupts import signal_name, stop_signals_raise


def run_command(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    setup: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse ``argv``, call ``setup`` then the subcommand's ``handler``; returns its exit code.

    An :class:`FLTestError` prints ``<prog>: error: <message>`` on stderr and returns the
    error's exit code (2 for bad input, 1 for a failure). Ctrl-C (SIGINT) and SIGTERM raise
    :class:`fltest.interrupts.Interrupted` while the handler runs: whoever runs the experiment
    stops it and says what it stopped, and the command prints one line
    ``<prog>: interrupted (<signal>): <what was stopped>`` and returns 130. A reader of stdout that went
    away (``| head``) ends the command quietly with 141, as SIGPIPE would.
    """
    args = parser.parse_args(argv)
    if setup is not None:
        setup(args)
    try:
        with stop_signals_raise():
            code = args.handler(args)
        sys.stdout.flush()  # here, not at exit: a pipe whose reader went away fails this flush (below)
        return code
    except FLTestError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        if not _reader_gone(sys.stdout):
            raise  # some other pipe's: a fault of its own
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit finds a reader
        return ExitCode.OUTPUT_CLOSED
    except KeyboardInterrupt as exc:  # what was recorded stays, with its summary saying so
        stopped = getattr(exc, "stopped", None)
        print(f"{parser.prog}: interrupted ({signal_name(exc)})" + (f": {stopped}" if stopped else ""), file=sys.stderr)
        return ExitCode.INTERRUPTED  # 128 + SIGINT, as a shell reports a Ctrl-C; SIGTERM stops a run the same way


def _reader_gone(stream: TextIO) -> bool:
    """Whether ``stream`` is a pipe whose reading end is closed (``poll`` reports an error on its writing end)."""
    poller = select.poll()
    poller.register(stream.fileno(), select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))
