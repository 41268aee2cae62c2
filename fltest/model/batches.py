"""The minibatches of one round of local training, shared by every model FLTest ships."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from fltest.config.schema import TrainingConfig


def local_batches(num_samples: int, training: TrainingConfig, seed: int) -> Iterator[np.ndarray]:
    """The sample indices of each minibatch, for ``local_epochs`` epochs or ``local_steps`` steps.

    Each epoch is one shuffled order drawn from a generator seeded by ``seed``, cut into batches of
    ``batch_size`` (the last one shorter); with ``local_steps`` the epochs repeat until that many
    batches were given.
    """
    rng = np.random.default_rng(seed)
    steps = 0
    epoch = 0
    while (training.local_steps is None and epoch < training.local_epochs) or (
        training.local_steps is not None and steps < training.local_steps
    ):
        order = rng.permutation(num_samples)
        for start in range(0, num_samples, training.batch_size):
            yield order[start : start + training.batch_size]
            steps += 1
            if training.local_steps is not None and steps >= training.local_steps:
                return
        epoch += 1


def local_step_count(num_samples: int, training: TrainingConfig) -> int:
    """How many minibatches :func:`local_batches` gives: ``local_steps``, or ``local_epochs`` times the batches of an epoch."""
    if training.local_steps is not None:
        return training.local_steps
    return training.local_epochs * math.ceil(num_samples / training.batch_size)
