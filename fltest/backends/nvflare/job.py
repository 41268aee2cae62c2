"""Build and export an experiment's NVFlare job: NVFlare's controller for the strategy on the server, the Client API script on clients."""

from __future__ import annotations

from pathlib import Path

from nvflare.app_common.app_constant import AppConstants
from nvflare.app_common.filters.exclude_vars import ExcludeVars
from nvflare.app_common.filters.percentile_privacy import PercentilePrivacy
from nvflare.job_config.api import FedJob
from nvflare.job_config.defs import FilterType
from nvflare.job_config.script_runner import FrameworkType, ScriptRunner

from fltest.backends.nvflare import client
from fltest.backends.nvflare.exchange import JOB_NAME, RunFiles
from fltest.backends.nvflare.strategies import server_controller
from fltest.config.privacy import PercentileSharing, SharedChanges
from fltest.config.schema import ExperimentConfig
from fltest.params import parameter_key

# How often a client without a task asks the server again (NVFlare's default: 2 s, which
# would add about that much to every round).
TASK_REQUEST_INTERVAL_S = 0.1


def sharing_filter(sharing: SharedChanges) -> PercentilePrivacy | ExcludeVars:
    """NVFlare's filter for ``sharing``: ``PercentilePrivacy``, or ``ExcludeVars`` of the withheld parameters' keys."""
    if isinstance(sharing, PercentileSharing):
        return PercentilePrivacy(percentile=sharing.percentile, gamma=sharing.gamma)
    return ExcludeVars(exclude_vars=[parameter_key(i) for i in sharing.parameters])


def export_job(config: ExperimentConfig, files: RunFiles) -> Path:
    """Export the job to ``files.job_root``; returns the job folder to give the simulator.

    Where the clients share part of their change (``training.privacy``), each client's result goes through
    NVFlare's filter for it (the clients send their changes, which it filters).

    ``fltest`` is an app package: the job refers to its installed code instead of
    copying it into the job's ``custom/`` folder.
    """
    job = FedJob(name=JOB_NAME, min_clients=config.clients, fail_fast=True)
    job.set_app_packages(["fltest"])
    job.to_server(server_controller(config, files))
    job.to_server({"server": {"task_request_interval": TASK_REQUEST_INTERVAL_S}})
    job.to_clients(ScriptRunner(script=str(Path(client.__file__).resolve()), framework=FrameworkType.NUMPY))
    sharing = config.training.privacy
    if isinstance(sharing, SharedChanges):  # NVFlare's own filter on the change each client sends
        job.to_clients(
            sharing_filter(sharing),
            filter_type=FilterType.TASK_RESULT,
            tasks=[AppConstants.TASK_TRAIN],  # by name: NVFlare 2.9 never applies a filter of the default tasks ["*"]
        )
    job.export_job(str(files.job_root))
    return files.job_root / JOB_NAME
