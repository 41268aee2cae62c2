"""Starting Ray in the driver: a private Ray on this machine, or a connection to a cluster (:mod:`.cluster`).

FLTest starts Ray itself, before Flower would (Flower's Ray backend calls ``ray.init`` only when
Ray is not yet initialised), so that a run's stop signals stay fltest's: Ray's driver replaces
SIGTERM's handler with one that calls ``sys.exit`` (a private Ray's kills its processes first),
which would end the process with no summary written and nothing recorded as interrupted.
"""

from __future__ import annotations

from typing import Any

import ray

from fltest.backends.pythonpath import driver_pythonpath
from fltest.config.schema import ExperimentConfig
from fltest.interrupts import restore_stop_handlers, stop_handlers


def init_ray(**init_args: Any) -> None:
    """``ray.init(**init_args)`` with the driver's ``sys.path`` shipped to every worker, keeping this process's stop handlers."""
    handlers = stop_handlers()
    try:
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": driver_pythonpath()}}, **init_args)
    finally:
        restore_stop_handlers(handlers)


def start_private_ray(config: ExperimentConfig) -> None:
    """A Ray of this process's own with the config's CPUs and GPUs (``address="local"``: never another cluster here)."""
    init_ray(
        address="local",
        num_cpus=config.total_cpus,
        num_gpus=config.total_gpus,
        logging_level="WARNING",
        include_dashboard=False,
    )
