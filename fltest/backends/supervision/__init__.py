"""The run supervisor every backend shares: its deadlines (:mod:`.deadlines`) and its follow loop (:mod:`.follow`).

A backend starts its framework and hands the supervisor a thin *transport* that reads what the
framework reports (rounds, a failure, the end) where it runs; the supervisor reports each round,
enforces the deadlines and, on any failure or stop signal, stops the run where it runs.
"""

from fltest.backends.supervision.deadlines import Deadlines
from fltest.backends.supervision.follow import Done, Event, Failed, Ready, Round, Transport, drain, follow_run

__all__ = ["Deadlines", "Done", "Event", "Failed", "Ready", "Round", "Transport", "drain", "follow_run"]
