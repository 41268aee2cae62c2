"""Local training on one BLAS thread in every backend, so that a client's update is the same wherever it trains.

How a matrix product is rounded depends on the threads OpenBLAS splits it over. The reference trains in the
driver (as many threads as cores), a Flower client in a Ray actor (Ray sets ``OMP_NUM_THREADS=1``), an NVFlare
client in a worker process (as many as cores): the same client, seed and data gave updates 7e-18 apart, and the
model of 500 CIFAR-shaped clients 1.4e-17 apart after 2 rounds (2026-12-07). PyTorch models pin their own threads
(:func:`fltest.model.torch_classifier.deterministic`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache

from threadpoolctl import ThreadpoolController


@cache
def _controller() -> ThreadpoolController:
    """The BLAS libraries this process has loaded (numpy's, at least), found once."""
    return ThreadpoolController()


def one_blas_thread() -> AbstractContextManager:
    """A ``with`` block in which the BLAS libraries use one thread (restored after)."""
    return _controller().limit(limits=1, user_api="blas")
