"""How many clients the NVFlare simulator runs at once: every client up to the machine's CPUs and memory, or the
config's ``options.threads`` (no simulator runs here: the fast tier)."""

from __future__ import annotations

import pytest

from fltest.backends.nvflare.concurrency import (
    MEMORY_RESERVE_BYTES,
    WORKER_MEMORY_BYTES,
    WORKERS_PER_CPU,
    simulator_concurrency,
)
from fltest.config.runs import NVFlareOptions

GIB = 2**30
DEFAULT = NVFlareOptions()


def test_a_small_run_runs_every_client_at_once():
    assert simulator_concurrency(10, DEFAULT, cpus=2, available_bytes=20 * GIB) == (10, "every client")


@pytest.mark.parametrize("clients", [120, 500])
def test_many_clients_on_two_cores_run_as_many_at_once_as_the_cpus_start(clients):
    chosen = simulator_concurrency(clients, DEFAULT, cpus=2, available_bytes=20 * GIB)
    assert chosen.threads == 2 * WORKERS_PER_CPU < clients
    assert chosen.reason == f"{WORKERS_PER_CPU} a CPU, 2 CPUs"


def test_memory_bounds_the_workers_when_it_holds_fewer_than_the_cpus_start():
    available = MEMORY_RESERVE_BYTES + 5 * WORKER_MEMORY_BYTES
    chosen = simulator_concurrency(120, DEFAULT, cpus=64, available_bytes=available)
    assert chosen.threads == 5 and chosen.reason.startswith("the memory available, ")
    assert simulator_concurrency(120, DEFAULT, cpus=64, available_bytes=GIB).threads == 1  # never 0


def test_options_threads_overrides_the_machine():
    assert simulator_concurrency(120, NVFlareOptions(threads=40), cpus=2, available_bytes=GIB) == (
        40,
        "options.threads",
    )
