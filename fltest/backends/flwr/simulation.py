"""A Flower simulation as a transport of the run supervisor: ``run_simulation`` in a thread, its ServerApp reporting into a queue.

The ServerApp runs :func:`fltest.backends.flwr.server_loop.serve_rounds` on a
:class:`~fltest.backends.flwr.pulling_grid.PullingGrid`, so that stopping the run makes it
return at its next wait for replies; the supervisor, in the main thread, reads the queue.
"""

from __future__ import annotations

import queue
import threading
import warnings
from typing import Any

from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fltest.backends.flwr.pulling_grid import SIMULATION_PULL_INTERVAL_S, PullingGrid, RunStopped
from fltest.backends.flwr.server_loop import serve_rounds
from fltest.backends.supervision import Done, Event, Failed, Ready, Round, drain
from fltest.config.schema import ExperimentConfig
from fltest.params import Params
from fltest.rounds import RoundResult

STOP_WAIT_S = 30.0  # for the simulation to end once stopped (a client mid-round finishes its training first)


class QueueSink:
    """The server loop's :class:`~fltest.backends.flwr.server_loop.RunSink` in process: every report an event in ``events``."""

    def __init__(self, events: queue.Queue[Event]) -> None:
        """Report into ``events``."""
        self.events = events

    def ready(self) -> None:
        """Every client answered."""
        self.events.put(Ready())

    def round_done(self, result: RoundResult) -> None:
        """A round ended."""
        self.events.put(Round(result))

    def failed(self, reason: str) -> None:
        """The run failed."""
        self.events.put(Failed(reason))

    def done(self, client_hosts: list[str]) -> None:
        """Every round ended."""
        self.events.put(Done({"client_hosts": client_hosts}))


def make_server_app(config: ExperimentConfig, initial: Params, sink: QueueSink, stop: threading.Event) -> ServerApp:
    """The simulation's ServerApp: the shared server loop from ``initial``; it returns once ``stop`` is set."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            serve_rounds(PullingGrid(grid, SIMULATION_PULL_INTERVAL_S, stop), config, initial, sink)
        except RunStopped:
            return

    return app


class SimulationTransport:
    """``run_simulation`` of ``client_app`` and FLTest's ServerApp in a thread; events from the ServerApp's queue."""

    name = "the Flower simulation"

    def __init__(
        self, config: ExperimentConfig, initial: Params, client_app: ClientApp, backend_config: dict[str, Any]
    ) -> None:
        """Describe the simulation; :meth:`start` starts it."""
        self._events: queue.Queue[Event] = queue.Queue()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        server_app = make_server_app(config, initial, QueueSink(self._events), self._stop)
        self._thread = threading.Thread(
            target=self._simulate,
            args=(server_app, client_app, config.clients, backend_config),
            name="fltest-flower-simulation",
            daemon=True,
        )

    def _simulate(
        self, server_app: ServerApp, client_app: ClientApp, clients: int, backend_config: dict[str, Any]
    ) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # run_simulation's own, for `flwr run`
                run_simulation(
                    server_app=server_app, client_app=client_app, num_supernodes=clients, backend_config=backend_config
                )
        except BaseException as exc:  # noqa: BLE001 - read by ended(), in the supervisor's thread
            self._error = exc

    def start(self) -> None:
        """Start the simulation."""
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the simulation's thread still runs (it stops Ray itself as it ends)."""
        return self._thread.is_alive()

    def events(self, wait_s: float) -> list[Event]:
        """What the ServerApp reported since the last call."""
        return drain(self._events, wait_s)

    def ended(self) -> str | None:
        """How the simulation ended without its ServerApp reporting an end (the error ``run_simulation`` raised)."""
        if self._thread.is_alive():
            return None
        if self._error is None:
            return "ended"
        return f"ended ({type(self._error).__name__}: {self._error})"

    def detail(self) -> str:
        """Nothing more: Flower's own errors are in its log."""
        return ""

    def stop(self) -> None:
        """Make the ServerApp return and wait (bounded) for the simulation to end; Ray ends with the process."""
        self._stop.set()
        self._thread.join(STOP_WAIT_S)

    def close(self) -> None:
        """Wait for the simulation to end once its ServerApp is done."""
        self.stop()
