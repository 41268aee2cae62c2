"""The run supervisor every backend shares: one deadline policy, one follow loop that stops the run on any way out.

The frameworks' own transports are tested through their backends (tests/test_flwr.py, test_nvflare.py,
the docker tier's deployment); these pin the loop's rules on a transport that plays back a script.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from fltest.backends.supervision import Deadlines, Done, Event, Failed, Ready, Round, follow_run
from fltest.errors import RunFailed
from fltest.rounds import RoundResult


class Scripted:
    """A transport that hands out its events one call at a time, then nothing; it notes what was asked of it."""

    name = "the scripted framework"

    def __init__(self, *script: list[Event], ended: str | None = None) -> None:
        self.script = list(script)
        self.ended_as = ended
        self.calls: list[str] = []

    def events(self, wait_s: float) -> list[Event]:
        if self.script:
            return self.script.pop(0)
        time.sleep(min(wait_s, 0.01))
        return []

    def ended(self) -> str | None:
        return self.ended_as if not self.script else None

    def detail(self) -> str:
        return "its log says why"

    def stop(self) -> None:
        self.calls.append("stop")

    def close(self) -> None:
        self.calls.append("close")


class Recorded:
    """A RunProgress that keeps what it was told."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.seen: list[str] = []
        self.fail_at = fail_at

    def setup_done(self) -> None:
        self.seen.append("setup")

    def round_done(self, result: RoundResult) -> None:
        if result.server_round == self.fail_at:
            raise KeyboardInterrupt
        self.seen.append(f"round {result.server_round}")

    def note(self, **info) -> None:
        self.seen.append(f"note {info}")


def _round(n: int) -> Round:
    return Round(RoundResult(n, [np.zeros(2)], {}, [0]))


FAST = Deadlines(round_timeout_s=0.2, startup_s=0.0, reply_grace_s=0.1)


def test_the_deadlines_derive_from_round_timeout_s_in_one_place():
    deadlines = Deadlines(round_timeout_s=30)
    assert (deadlines.local_training_s, deadlines.replies_s, deadlines.discovery_s) == (30, 40, 150)
    assert (deadlines.round_result_s(1), deadlines.round_result_s(2)) == (170, 50)
    assert deadlines.describe_round_result_s(2) == "50 s (round_timeout_s 30 s + 2 x 10 s reply grace)"


def test_rounds_are_reported_in_order_then_the_framework_is_let_end():
    transport = Scripted([Ready()], [_round(1), _round(2)], [Done({"client_hosts": ["a"]})])
    progress = Recorded()
    assert follow_run(transport, progress, 2, FAST) == {"client_hosts": ["a"]}
    assert progress.seen == ["setup", "round 1", "round 2"] and transport.calls == ["close"]


@pytest.mark.parametrize(
    "script, ended, message",
    [
        (
            [[Ready()], [_round(1)]],
            None,
            "round 2: no result from the scripted framework within 0.4 s (round_timeout_s 0.2 s"
            " + 2 x 0.1 s reply grace) (its log says why)",
        ),
        (
            [[_round(1)], [Failed("round 2: client 1 failed: ValueError: no")]],
            None,
            "round 2: client 1 failed: ValueError: no",
        ),
        ([[_round(2)]], None, "the scripted framework reported round 2 after round 0"),
        ([[_round(1)], [Done()]], None, "the scripted framework ended after round 1 of 2"),
        (
            [[_round(1)]],
            "exited with code 3",
            "the scripted framework exited with code 3 after round 1 of 2 (its log says why)",
        ),
    ],
    ids=["deadline", "failure", "order", "early-end", "exit"],
)
def test_a_run_that_cannot_go_on_fails_in_one_line_and_is_stopped_where_it_runs(script, ended, message):
    transport = Scripted(*script, ended=ended)
    with pytest.raises(RunFailed) as failure:
        follow_run(transport, Recorded(), 2, FAST)
    assert str(failure.value) == message
    assert transport.calls == ["stop"]


def test_an_interruption_while_a_round_is_recorded_stops_the_run_where_it_runs():
    transport = Scripted([_round(1)], [_round(2)])
    with pytest.raises(KeyboardInterrupt):
        follow_run(transport, Recorded(fail_at=2), 3, FAST)
    assert transport.calls == ["stop"]


class EndsBetweenTwoLooks(Scripted):
    """A framework that has exited by the first look at its end, its last rounds written just before."""

    def __init__(self) -> None:
        super().__init__(ended="exited with code 0")
        self.looks = 0

    def events(self, wait_s: float) -> list[Event]:
        self.looks += 1
        return [_round(1), _round(2), Done()] if self.looks == 2 else []


def test_what_the_framework_wrote_just_before_it_ended_is_still_read():
    transport = EndsBetweenTwoLooks()
    progress = Recorded()
    assert follow_run(transport, progress, 2, FAST) == {}
    assert progress.seen == ["setup", "round 1", "round 2"] and transport.calls == ["close"]
