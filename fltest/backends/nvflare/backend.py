"""Run FLTest's experiment in the NVFlare simulator, on this machine, and record it like any backend."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from fltest.backends.base import Backend, RunJob
from fltest.backends.nvflare.concurrency import simulator_concurrency
from fltest.backends.nvflare.exchange import SPEC_VARIABLE, RunFiles, RunSpec
from fltest.backends.nvflare.job import export_job
from fltest.backends.nvflare.simulator import SimulatorProcess, simulator_environment, worker_lost
from fltest.backends.nvflare.strategies import unsupported
from fltest.backends.nvflare.transport import SHUTDOWN_S, SimulatorTransport
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.backends.supervision import Deadlines, follow_run
from fltest.config.runs import NVFlareRun
from fltest.config.schema import ExperimentConfig
from fltest.errors import FieldError, RunFailed
from fltest.params import save_params

log = logging.getLogger(__name__)
# Starts of the simulator a run may take when one of NVFlare's worker processes never connects before round 1
# (NVFlare gives up on it after 60 s and never starts that client: seen once in CI, on a loaded machine).
START_ATTEMPTS = 2


class NVFlareBackend(Backend):
    """NVIDIA FLARE 2.9: a job of NVFlare's controller for the strategy (Client API clients) in the NVFlare simulator.

    Options: ``keep_workspace`` (default ``false``): keep the job, the simulator's
    workspace and the exchanged files in ``<run dir>/nvflare/`` after the run; ``threads``: how
    many clients run at once (:mod:`fltest.backends.nvflare.concurrency` picks it by default).
    """

    framework = "nvflare"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why NVFlare 2.9 has no implementation of the config's strategy (:mod:`fltest.backends.nvflare.strategies`)."""
        return unsupported(config)

    def check(self, config: ExperimentConfig, run: NVFlareRun) -> None:
        """Refuse ``options.threads`` above the clients (one line naming the field; the caller names the file)."""
        if run.options.threads is not None and run.options.threads > config.clients:
            raise FieldError(
                f"runs.{run.name}.options.threads: {run.options.threads} is above clients: {config.clients}"
            )

    def run(self, job: RunJob) -> None:
        """Export the job, run the simulator and report each round as the server reports it."""
        config = job.config
        if cluster_address():
            log.info("%s is set: the nvflare backend ignores it and runs on this machine", ADDRESS_VARIABLE)
        files = RunFiles(job.run_dir / "nvflare")
        deadlines = Deadlines.of(config)
        concurrency = simulator_concurrency(config.clients, job.run.options)
        job.progress.note(nvflare_threads=concurrency.threads)
        log_path = job.run_dir / "simulator.log"
        log_path.unlink(missing_ok=True)
        log.info(
            "nvflare: simulating %d clients, %d at once (%s); log: %s",
            config.clients,
            concurrency.threads,
            concurrency.reason,
            log_path,
        )
        try:
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    self._simulate(job, files, concurrency.threads, log_path, deadlines)
                    return
                except RunFailed as exc:
                    if attempt == START_ATTEMPTS or files.read_round(1) is not None or not worker_lost(log_path):
                        raise
                    log.warning("nvflare: %s; starting the simulator again (attempt %d)", exc, attempt + 1)
        finally:
            if not job.run.options.keep_workspace:
                shutil.rmtree(files.root, ignore_errors=True)

    def _simulate(self, job: RunJob, files: RunFiles, threads: int, log_path: Path, deadlines: Deadlines) -> None:
        """One start of the simulator on fresh exchange files, followed to the run's end."""
        config = job.config
        shutil.rmtree(files.root, ignore_errors=True)
        files.create()
        RunSpec(config=config, shards=job.shards, workspace=files.root).write(files.spec)
        save_params(files.initial_params, job.initial_params)
        job_dir = export_job(config, files)
        # TMPDIR holds the simulator's Unix sockets, whose paths must stay short (108 bytes): not the run folder.
        with tempfile.TemporaryDirectory(prefix="fltest-nvflare-") as tmp:
            env = simulator_environment(Path(tmp), files.spec, SPEC_VARIABLE)
            sim = SimulatorProcess(job_dir, files.simulator_workspace, config.clients, threads, log_path, env)
            with sim:
                follow_run(
                    SimulatorTransport(
                        files,
                        sim,
                        threads,
                        config.training.rounds,
                        deadlines.startup_s,
                        SHUTDOWN_S if job.run.options.keep_workspace else 0.0,
                    ),
                    job.progress,
                    config.training.rounds,
                    deadlines,
                )
