"""A client's update is the same bit for bit whatever BLAS threads its process runs (the driver: every core; a Ray
actor: one), so that the frameworks' models stay the reference's at any client count."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from fltest.config.schema import ExperimentConfig
from fltest.fedavg import client_update
from fltest.hooks import Hooks

SAMPLES = 150  # a CIFAR-shaped shard whose update OpenBLAS rounds differently on 1 and 2 threads (7e-18 apart)


def test_a_client_s_update_is_the_same_on_one_blas_thread_and_on_two():
    config = ExperimentConfig.model_validate(
        {
            "name": "blas",
            "dataset": {"source": "digits"},
            "clients": 2,
            "training": {"rounds": 1, "local_epochs": 1, "batch_size": 32, "learning_rate": 0.05},
            "runs": [{"name": "reference", "framework": "reference"}],
        }
    )
    rng = np.random.default_rng(0)
    x, y = rng.random((SAMPLES, 3072)), rng.integers(0, 10, SAMPLES)
    params = [rng.normal(size=(3072, 10)) * 0.01, np.zeros(10)]
    updates = []
    for threads in (1, 2):  # as a process's default: the Ray actor's, the driver's on two cores
        with threadpool_limits(threads, user_api="blas"):
            updates.append(client_update(config, Hooks(), 0, 1, params, x, y).params)
    assert all(np.array_equal(a, b) for a, b in zip(*updates))
