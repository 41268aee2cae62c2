"""The one follow loop: a framework's rounds, failure, end and stop, read from a thin transport.

A transport reads what the framework reports where it runs (a queue filled by an in-process
ServerApp, NVFlare's exchange files, the lines of a Flower run's log) as :data:`Event` values, and
knows how to stop the run there. :func:`follow_run` reports each round to the runner in order,
fails a run whose framework reports a failure, ends early, or misses a round's deadline, and stops
the run where it runs on any way out but its end: a failure, a bug, Ctrl-C or SIGTERM alike.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from fltest.backends.supervision.deadlines import Deadlines
from fltest.errors import RunFailed
from fltest.rounds import RoundResult, RunProgress

POLL_S = 0.1  # how long a transport may wait for an event before the deadlines are checked again


@dataclass(frozen=True)
class Ready:
    """The framework is up and has found its clients: the time so far is set-up."""


@dataclass(frozen=True)
class Round:
    """A round has ended with ``result``."""

    result: RoundResult


@dataclass(frozen=True)
class Failed:
    """The run failed; ``reason`` is the one line that says why."""

    reason: str


@dataclass(frozen=True)
class Done:
    """The framework finished every round; ``info`` goes into the run's summary."""

    info: dict[str, Any] = field(default_factory=dict)


Event = Ready | Round | Failed | Done


class Transport(Protocol):
    """What the supervisor reads a run from, and how it stops it, for one framework."""

    name: str  # how a failure line names the framework's side: "the NVFlare simulator", "Flower run 42"

    def events(self, wait_s: float) -> list[Event]:
        """The events since the last call, waiting up to ``wait_s`` for the first."""

    def ended(self) -> str | None:
        """``None`` while the framework runs; once it ended without reporting so, how (``exited with code 1``)."""

    def detail(self) -> str:
        """What a failure line adds about the framework's side (its last logged error), or ``""``."""

    def stop(self) -> None:
        """Stop the run where it runs (bounded; a run that already ended is fine)."""

    def close(self) -> None:
        """After :class:`Done`: let the framework end; raise :class:`RunFailed` if it ends badly."""


def drain(events: queue.Queue[Event], wait_s: float) -> list[Event]:
    """Every event in ``events``, waiting up to ``wait_s`` for the first: a transport's :meth:`Transport.events`
    when a thread of its own fills a queue."""
    try:
        found = [events.get(timeout=wait_s)]
    except queue.Empty:
        return []
    while not events.empty():
        found.append(events.get_nowait())
    return found


def follow_run(transport: Transport, progress: RunProgress, rounds: int, deadlines: Deadlines) -> dict[str, Any]:
    """Report ``transport``'s rounds 1..``rounds`` to ``progress`` until the run is done; returns its :class:`Done` info.

    Raises :class:`RunFailed` with one line for a failure the framework reports, an end before the
    last round, or a round with no result within :meth:`Deadlines.round_result_s`. Whatever ends
    the loop but the run's end (those failures, an error recording a round, an interruption)
    stops the run where it runs first.
    """
    try:
        info = _follow(transport, progress, rounds, deadlines)
    except BaseException:
        transport.stop()
        raise
    transport.close()
    return info


def _with_detail(line: str, transport: Transport) -> str:
    detail = transport.detail()
    return f"{line} ({detail})" if detail else line


def _follow(transport: Transport, progress: RunProgress, rounds: int, deadlines: Deadlines) -> dict[str, Any]:
    next_round, set_up, last_look = 1, False, False
    deadline = time.monotonic() + deadlines.round_result_s(1)
    while True:
        for event in transport.events(POLL_S):
            if isinstance(event, Failed):
                raise RunFailed(event.reason)
            if isinstance(event, Done):
                if next_round <= rounds:
                    raise RunFailed(f"{transport.name} ended after round {next_round - 1} of {rounds}")
                return event.info
            if not set_up:  # Ready, or a first round with no Ready before it
                progress.setup_done()
                set_up = True
            if isinstance(event, Round):
                if event.result.server_round != next_round:
                    raise RunFailed(
                        f"{transport.name} reported round {event.result.server_round} after round {next_round - 1}"
                    )
                progress.round_done(event.result)
                next_round += 1
                deadline = time.monotonic() + deadlines.round_result_s(next_round)
        ended = transport.ended()
        if ended is not None:
            if not last_look:  # what it wrote just before it ended is read once more
                last_look = True
                continue
            raise RunFailed(
                _with_detail(f"{transport.name} {ended} after round {next_round - 1} of {rounds}", transport)
            )
        if time.monotonic() > deadline:
            waited = deadlines.describe_round_result_s(next_round)
            raise RunFailed(
                _with_detail(f"round {next_round}: no result from {transport.name} within {waited}", transport)
            )
