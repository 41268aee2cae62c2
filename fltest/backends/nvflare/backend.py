"""Run FLTest's experiment in the NVFlare simulator, on this machine, and record it like any backend."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path

from fltest.backends.base import STARTUP_S, Backend, RunJob
from fltest.backends.nvflare.exchange import SPEC_VARIABLE, RunFiles, RunSpec
from fltest.backends.nvflare.job import export_job
from fltest.backends.nvflare.simulator import SimulatorProcess, simulator_environment
from fltest.backends.nvflare.strategies import unsupported
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.config.schema import ExperimentConfig
from fltest.errors import RunFailed
from fltest.params import save_params

log = logging.getLogger(__name__)

SHUTDOWN_S = 60.0  # allowed for the simulator to exit once the last round is in
POLL_S = 0.05


def simulator_threads(config: ExperimentConfig) -> int:
    """Clients the simulator runs at once: every client, each in a worker process of its own.

    With fewer threads than clients the simulator starts a new worker process for every
    task of a client it swaps in (several seconds each), which costs far more than the
    idle workers of waiting clients; ``total_cpus`` is not a bound here (see the README).
    """
    return config.clients


class NVFlareBackend(Backend):
    """NVIDIA FLARE 2.9: a job of NVFlare's controller for the strategy (Client API clients) in the NVFlare simulator.

    Options: ``keep_workspace`` (default ``false``): keep the job, the simulator's
    workspace and the exchanged files in ``<run dir>/nvflare/`` after the run.
    """

    framework = "nvflare"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why NVFlare 2.9 has no implementation of the config's strategy (:mod:`fltest.backends.nvflare.strategies`)."""
        return unsupported(config)

    def run(self, job: RunJob) -> None:
        """Export the job, run the simulator and report each round as the server reports it."""
        config = job.config
        if cluster_address():
            log.info("%s is set: the nvflare backend ignores it and runs on this machine", ADDRESS_VARIABLE)
        files = RunFiles(job.run_dir / "nvflare")
        shutil.rmtree(files.root, ignore_errors=True)
        files.create()
        try:
            RunSpec(config=config, shards=job.shards, workspace=files.root).write(files.spec)
            save_params(files.initial_params, job.initial_params)
            job_dir = export_job(config, files)
            threads = simulator_threads(config)
            job.progress.note(nvflare_threads=threads)
            log_path = job.run_dir / "simulator.log"
            log_path.unlink(missing_ok=True)
            log.info("nvflare: simulating %d clients, %d at once; log: %s", config.clients, threads, log_path)
            # TMPDIR holds the simulator's Unix sockets, whose paths must stay short (108 bytes): not the run folder.
            with tempfile.TemporaryDirectory(prefix="fltest-nvflare-") as tmp:
                env = simulator_environment(Path(tmp), files.spec, SPEC_VARIABLE)
                sim = SimulatorProcess(job_dir, files.simulator_workspace, config.clients, threads, log_path, env)
                with sim:
                    self._follow(job, files, sim)
        finally:
            if not job.run.options.keep_workspace:
                shutil.rmtree(files.root, ignore_errors=True)

    def _follow(self, job: RunJob, files: RunFiles, sim: SimulatorProcess) -> None:
        """Report rounds while the simulator runs; a client failure, a silent round or a bad exit fails the run."""
        config = job.config
        timeout = config.training.round_timeout_s
        next_round, setup_done = 1, False
        start = time.monotonic()
        deadline = start + STARTUP_S + timeout
        exit_code = None
        while next_round <= config.training.rounds:
            result = files.read_round(next_round)
            if not setup_done and (result is not None or files.ready_clients() == config.clients):
                job.progress.setup_done()
                setup_done = True
                log.info("nvflare: %d clients up after %.1f s", config.clients, time.monotonic() - start)
            if result is not None:
                job.progress.round_done(result)
                next_round += 1
                deadline = time.monotonic() + timeout
                continue
            failures = files.failures()
            if failures:
                raise RunFailed(failures[0])
            if exit_code is not None:  # exited, and no round file appeared after it did
                raise RunFailed(self._exit_message(sim, exit_code, next_round - 1, config.training.rounds))
            if time.monotonic() > deadline:
                error = sim.last_error()
                detail = f" (last error in its log: {error})" if error else ""
                raise RunFailed(
                    f"round {next_round}: no result from the NVFlare simulator within {timeout:g} s{detail}"
                )
            exit_code = sim.poll()
            if exit_code is None:
                time.sleep(POLL_S)
        exit_code = sim.wait(SHUTDOWN_S)
        if exit_code is None:
            log.warning("nvflare: the simulator did not exit %g s after the last round; stopping it", SHUTDOWN_S)
        elif exit_code != 0:
            raise RunFailed(self._exit_message(sim, exit_code, config.training.rounds, config.training.rounds))

    @staticmethod
    def _exit_message(sim: SimulatorProcess, exit_code: int, rounds_done: int, rounds: int) -> str:
        """Why the simulator's exit fails the run, with the last error it logged."""
        error = sim.last_error()
        detail = f": {error}" if error else ""
        return (
            f"the NVFlare simulator exited with code {exit_code} after round {rounds_done} of {rounds}"
            f"{detail} (log: {sim.log_path})"
        )
