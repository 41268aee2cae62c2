"""What the ServerApp tells the fltest process, as lines in the run's log (``flwr log``).

The ServerApp runs where Flower runs it (the SuperLink's ``flwr-serverapp``, a simulation's
``flwr-simulation``), so it cannot write fltest's results itself: it prints ``FLTEST-READY`` once
every client answered, one ``FLTEST-ROUND`` line a round (the global model, exactly, as base64
``.npz``; the training metrics; the selected partitions; the round's time),
``FLTEST-DONE`` at the end, and ``FLTEST-ERROR`` with the one-line reason when the run fails. The
fltest process reads the lines back as the run supervisor's events, and evaluates and records
each round.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from dataclasses import asdict

from fltest.backends.supervision.follow import Done, Event, Failed, Ready, Round
from fltest.params import params_from_bytes, params_to_bytes
from fltest.rounds import RoundPrivacy, RoundResult

_LINE = re.compile(r"FLTEST-(READY|ROUND|DONE|ERROR) (\S+)")


def _emit(kind: str, payload: dict) -> None:
    """Print one line (a single write, so the log uploader never splits it) and flush."""
    encoded = base64.b64encode(json.dumps(payload).encode()).decode()
    sys.stdout.write(f"FLTEST-{kind} {encoded}\n")
    sys.stdout.flush()


class LogSink:
    """The server loop's :class:`~fltest.backends.flwr.server_loop.RunSink` in the SuperLink: lines of the run's log.

    Flower uploads a ServerApp's output every 0.2 s and ``flwr log --stream`` asks for it every 0.5 s, so
    the lines reach fltest in batches: each round's line carries its time as measured here, from the end
    of the set-up (``ready``) or of the round before.
    """

    def __init__(self) -> None:
        """Start timing (the set-up's end resets it)."""
        self._mark = time.monotonic()

    def ready(self) -> None:
        """Every client answered."""
        self._mark = time.monotonic()
        _emit("READY", {})

    def round_done(self, result: RoundResult) -> None:
        """Print a round's result, with its time."""
        now = time.monotonic()
        _emit(
            "ROUND",
            {
                "round": result.server_round,
                "params": base64.b64encode(params_to_bytes(result.params)).decode(),
                "train_metrics": result.train_metrics,
                "clients": result.clients,
                "round_s": now - self._mark,
                "privacy": None if result.privacy is None else asdict(result.privacy),
            },
        )
        self._mark = now

    def failed(self, reason: str) -> None:
        """Print why the run failed (one line)."""
        _emit("ERROR", {"reason": reason})

    def done(self, client_hosts: list[str]) -> None:
        """Print the end of a completed run, with the hosts the clients trained on."""
        _emit("DONE", {"client_hosts": client_hosts})


def parse_line(line: str) -> Event | None:
    """The event a log line carries, or ``None`` for any other line."""
    match = _LINE.search(line)
    if not match:
        return None
    kind, payload = match.group(1), json.loads(base64.b64decode(match.group(2)))
    if kind == "READY":
        return Ready()
    if kind == "DONE":
        return Done({"client_hosts": payload["client_hosts"]})
    if kind == "ERROR":
        return Failed(payload["reason"])
    params = params_from_bytes(base64.b64decode(payload["params"]))
    privacy = payload.get("privacy")
    return Round(
        RoundResult(
            payload["round"],
            params,
            payload["train_metrics"],
            payload["clients"],
            payload.get("round_s"),
            None if privacy is None else RoundPrivacy(**privacy),
        )
    )
