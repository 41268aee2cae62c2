"""Stop signals as one exception: Ctrl-C (SIGINT) and a scheduler's SIGTERM stop a run the same way.

Python turns SIGINT into :class:`KeyboardInterrupt` but lets SIGTERM end the process at once,
with no summary written and nothing stopped where the run runs. While a command runs, both
raise :class:`Interrupted` (a :class:`KeyboardInterrupt`) in the main thread instead: the run
is recorded as ``interrupted``, the framework is stopped, and the command exits 130.

Libraries may put their own handler in place (Ray's driver makes SIGTERM call ``sys.exit``):
code that starts them takes :func:`stop_handlers` first and puts them back with
:func:`restore_stop_handlers`. What must be written whole (a round's metrics line, its model and
the count of rounds) is written inside :func:`stop_signals_deferred`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived: ``signal_name`` says which.

    Whoever stops the run on its way out sets ``stopped`` (on any :class:`KeyboardInterrupt`), what the
    command's last line then says it stopped.
    """

    def __init__(self, signal_name: str = "SIGINT") -> None:
        """An interruption by ``signal_name``; :attr:`stopped` is set by whoever stops the run."""
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.stopped: str | None = None


def signal_name(interrupt: KeyboardInterrupt) -> str:
    """The signal behind ``interrupt``: an :class:`Interrupted`'s own, SIGINT for a plain KeyboardInterrupt."""
    return interrupt.signal_name if isinstance(interrupt, Interrupted) else "SIGINT"


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def stop_handlers() -> dict[int, Any]:
    """The handlers SIGINT and SIGTERM have now."""
    return {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}


def restore_stop_handlers(handlers: dict[int, Any]) -> None:
    """Put back ``handlers`` (from :func:`stop_handlers`); nothing outside the main thread, where Python allows none."""
    if threading.current_thread() is threading.main_thread():
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread; the old handlers after it."""
    before = stop_handlers()
    restore_stop_handlers({sig: _raise_interrupted for sig in STOP_SIGNALS})
    try:
        yield
    finally:
        restore_stop_handlers(before)


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM wait: the first to arrive is raised again as the block ends, to the
    handler it would have met, so that what the block writes is written whole. In other threads (Python runs no
    handler there) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    before = stop_handlers()
    restore_stop_handlers({sig: lambda signum, frame: held.append(signum) for sig in STOP_SIGNALS})
    try:
        yield
    finally:
        restore_stop_handlers(before)
        if held:
            signal.raise_signal(held[0])  # its handler runs here, before raise_signal returns
