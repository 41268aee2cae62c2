"""The NVFlare simulator as a transport of the run supervisor: the run's exchange files, the simulator's process."""

from __future__ import annotations

import logging
import time

from fltest.backends.nvflare.exchange import RunFiles
from fltest.backends.nvflare.simulator import SimulatorProcess
from fltest.backends.supervision import Done, Event, Failed, Ready, Round
from fltest.errors import RunFailed
from fltest.process_guard import ENDED_RUN_GRACE_S

log = logging.getLogger(__name__)

WORKER_CONNECT_S = 60.0  # how long NVFlare's simulator waits for a worker process it started to listen for it
SHUTDOWN_S = 60.0  # allowed for the simulator to exit once the last round is in, when its workspace is kept


class SimulatorTransport:
    """Reads the rounds, the clients' readiness and failures the simulator's processes write; stops the simulator."""

    name = "the NVFlare simulator"

    def __init__(
        self,
        files: RunFiles,
        sim: SimulatorProcess,
        at_once: int,
        rounds: int,
        startup_s: float,
        end_wait_s: float = 0.0,
    ) -> None:
        """Follow the simulator ``sim`` (started) through ``files``, for ``rounds`` rounds: set up once ``at_once``
        clients (its threads) have their shards, failed if they have not within ``startup_s``.

        ``end_wait_s``: how long :meth:`close` lets the simulator end by itself after the last round (its teardown,
        about 9 s here, yields nothing the run needs, but completes a workspace kept for a look): 0 ends it at once.
        """
        self.files = files
        self._end_wait_s = end_wait_s
        self.sim = sim
        self.at_once = at_once
        self.startup_s = startup_s
        self.rounds = rounds
        self._next_round = 1
        self._ready = False
        self._started = time.monotonic()

    def events(self, wait_s: float) -> list[Event]:
        """Readiness (the clients run at once have their shards) or its failure, new rounds, the first failure,
        the end after the last round."""
        found = self._read()
        if not found:
            time.sleep(wait_s)
            found = self._read()
        return found

    def _read(self) -> list[Event]:
        found: list[Event] = []
        if not self._ready:
            ready, waited = self.files.ready_clients(), time.monotonic() - self._started
            if ready >= self.at_once:
                self._ready = True
                log.info("nvflare: %d clients up after %.1f s", ready, waited)
                found.append(Ready())
            elif waited > WORKER_CONNECT_S and self.sim.lost_a_worker():  # that client will never start
                found.append(Failed(f"{self.name}: a worker process never connected to it ({self.sim.last_error()})"))
            elif waited > self.startup_s:  # NVFlare's workers give up on their server cell, and the simulator waits
                error = self.sim.last_error()
                found.append(
                    Failed(
                        f"{self.name}: {ready} of {self.at_once} clients started within {self.startup_s:g} s"
                        + (f" ({error})" if error else f" (log: {self.sim.log_path})")
                    )
                )
        while self._next_round <= self.rounds and (result := self.files.read_round(self._next_round)) is not None:
            found.append(Round(result))
            self._next_round += 1
        failures = self.files.failures()
        if failures:
            found.append(Failed(failures[0]))
        elif self._next_round > self.rounds:
            found.append(Done())
        return found

    def ended(self) -> str | None:
        """``exited with code N`` once the simulator has exited (before the last round)."""
        code = self.sim.poll()
        return None if code is None else f"exited with code {code}"

    def detail(self) -> str:
        """The last error of the simulator's log, and where the log is."""
        error = self.sim.last_error()
        return f"last error in its log {self.sim.log_path}: {error}" if error else f"log: {self.sim.log_path}"

    def stop(self) -> None:
        """Stop the simulator and every process it started."""
        self.sim.stop()

    def close(self) -> None:
        """After the last round: let the simulator end by itself for ``end_wait_s`` (a non-zero exit then fails the
        run), then end what is left of it."""
        code = self.sim.wait(self._end_wait_s) if self._end_wait_s else None
        if code is None and self._end_wait_s:
            log.warning("nvflare: the simulator did not exit %g s after the last round; stopping it", self._end_wait_s)
        self.sim.stop(ENDED_RUN_GRACE_S)
        if code:
            raise RunFailed(
                f"{self.name} exited with code {code} after round {self.rounds} of {self.rounds} ({self.detail()})"
            )
