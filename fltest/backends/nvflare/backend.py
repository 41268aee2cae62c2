"""Run FLTest's experiment in the NVFlare simulator, on this machine, and record it like any backend."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from fltest.backends.base import Backend, RunJob
from fltest.backends.nvflare.exchange import SPEC_VARIABLE, RunFiles, RunSpec
from fltest.backends.nvflare.job import export_job
from fltest.backends.nvflare.simulator import SimulatorProcess, simulator_environment
from fltest.backends.nvflare.transport import SimulatorTransport
from fltest.backends.ray_address import ADDRESS_VARIABLE, cluster_address
from fltest.backends.supervision import Deadlines, follow_run
from fltest.config.schema import ExperimentConfig
from fltest.params import save_params

log = logging.getLogger(__name__)


_FEDOPT_ONLY = ("NVFlare 2.9 has {name} only through its FedOpt controller (nvflare.app_opt.pt.fedopt_ctl.FedOpt), "
                "which steps a torch.optim optimizer over a PyTorch module the server holds; FLTest's models reach "
                "NVFlare as lists of numpy arrays (FrameworkType.NUMPY)")
UNSUPPORTED_STRATEGIES = {  # strategy -> why NVFlare cannot run it with an implementation of its own
    "fedavgm": _FEDOPT_ONLY.format(name="server momentum (FedAvgM: SGD with momentum)"),
    "fedadagrad": _FEDOPT_ONLY.format(name="FedAdagrad (torch.optim.Adagrad)"),
    "fedadam": _FEDOPT_ONLY.format(name="FedAdam (torch.optim.Adam)"),
    "fedyogi": "NVFlare 2.9 has no FedYogi",
}


def simulator_threads(config: ExperimentConfig) -> int:
    """Clients the simulator runs at once: every client, each in a worker process of its own.

    With fewer threads than clients the simulator starts a new worker process for every
    task of a client it swaps in (several seconds each), which costs far more than the
    idle workers of waiting clients; ``total_cpus`` is not a bound here (see the README).
    """
    return config.clients


class NVFlareBackend(Backend):
    """NVIDIA FLARE 2.9: a FedAvg job (Client API clients) in the NVFlare simulator.

    Options: ``keep_workspace`` (default ``false``): keep the job, the simulator's
    workspace and the exchanged files in ``<run dir>/nvflare/`` after the run.
    """

    framework = "nvflare"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """NVFlare 2.9 has FedAvg and FedProx for models sent as numpy arrays, and nothing else of the config's."""
        return UNSUPPORTED_STRATEGIES.get(config.training.strategy.name)

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
                    follow_run(SimulatorTransport(files, sim, config.clients, config.training.rounds), job.progress,
                               config.training.rounds, Deadlines.of(config))  # fmt: skip
        finally:
            if not job.run.options.keep_workspace:
                shutil.rmtree(files.root, ignore_errors=True)
