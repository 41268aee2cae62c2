"""Connecting the driver to a Ray cluster (:mod:`.cluster`), keeping the driver's stop signals.

The driver joins a cluster to check its nodes and put the shards into its object store (Flower's
simulation runtime, another process, joins it again to run the clients). Ray's driver replaces
SIGTERM's handler with one that calls ``sys.exit`` (a private Ray's kills its processes first),
which would end the process with no summary written and nothing recorded as interrupted.
"""

from __future__ import annotations

from typing import Any

import ray

from fltest.backends.pythonpath import driver_pythonpath
from fltest.interrupts import restore_stop_handlers, stop_handlers


def init_ray(**init_args: Any) -> None:
    """``ray.init(**init_args)`` with the driver's ``sys.path`` shipped to every worker, keeping this process's stop handlers."""
    handlers = stop_handlers()
    try:
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": driver_pythonpath()}}, **init_args)
    finally:
        restore_stop_handlers(handlers)
