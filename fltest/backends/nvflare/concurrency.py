"""How many clients the NVFlare simulator runs at once (its ``-t``): from the machine, the client count, the config.

With as many threads as clients, each client lives in a worker process of its own for the whole run.
With fewer, the simulator swaps clients: every task of a client starts a worker process that exits
after it (``simulator_runner.py``), a few seconds each. Every worker also gives up on its server cell
10 s after it starts (``CELL_CONNECT_CHECK_TIMEOUT``, ``simulator_worker.py``): on a 2-core machine 120
workers starting at once do not all connect (a bare job hung at 81 of 120). So FLTest runs every client
at once up to what the CPUs start within that time and the memory holds, and swaps clients above it.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import psutil

from fltest.config.runs import NVFlareOptions

# Workers one CPU starts at once within NVFlare's 10 s connect check: a worker's start (Python, NVFlare,
# numpy, FLTest) takes about 1.6 CPU-seconds; 10 clients on 2 cores were all up after 12.9 s (2026-12-07).
WORKERS_PER_CPU = 6
WORKER_MEMORY_BYTES = 300 * 2**20  # a worker's resident memory, about 0.2 GB measured, with a margin
MEMORY_RESERVE_BYTES = 2 * 2**30  # kept for the driver, the simulator's server and the rest of the machine


class Concurrency(NamedTuple):
    """The simulator's threads and why (the run's start line says both)."""

    threads: int
    reason: str


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container's cpuset sets)."""
    return len(os.sched_getaffinity(0))


def simulator_concurrency(
    clients: int, options: NVFlareOptions, cpus: int | None = None, available_bytes: int | None = None
) -> Concurrency:
    """``options.threads`` when set, else every client up to the CPUs' and the memory's bounds (at least 1)."""
    if options.threads is not None:
        return Concurrency(options.threads, "options.threads")
    cpus = machine_cpus() if cpus is None else cpus
    available_bytes = psutil.virtual_memory().available if available_bytes is None else available_bytes
    by_cpus = WORKERS_PER_CPU * cpus
    by_memory = max(1, (available_bytes - MEMORY_RESERVE_BYTES) // WORKER_MEMORY_BYTES)
    threads = min(clients, by_cpus, by_memory)
    if threads == clients:
        return Concurrency(threads, "every client")
    if by_cpus <= by_memory:
        return Concurrency(threads, f"{WORKERS_PER_CPU} a CPU, {cpus} CPUs")
    return Concurrency(threads, f"the memory available, {available_bytes / 2**30:.1f} GiB")
