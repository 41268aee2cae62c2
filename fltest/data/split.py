"""Which rows are held out for the test and which each client trains on: from the labels alone."""

from __future__ import annotations

import datasets
import numpy as np

from fltest.config.schema import ExperimentConfig
from fltest.data.partition import partition
from fltest.data.sources import label_array, load_source, split_sizes
from fltest.errors import InputError


def split_indices(labels: np.ndarray, config: ExperimentConfig) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(train_rows, test_rows, parts)``, seeded: the held-out rows, then each client's rows of the training rows.

    ``parts[c]`` indexes into ``train_rows``. Raises :class:`InputError` naming the field
    when the split cannot be drawn (too few samples, a partition that leaves a client short).
    """
    rng = np.random.default_rng([config.seed, 0])
    num_train, num_test = split_sizes(len(labels), config.dataset)
    if num_train < 1:
        raise InputError(f"dataset.test_fraction: leaves no training samples out of {len(labels)}")
    order = rng.permutation(len(labels))[: num_train + num_test]
    test_rows, train_rows = np.sort(order[:num_test]), np.sort(order[num_test:])
    parts = partition(labels[train_rows], config.clients, config.partition, rng)
    return train_rows, test_rows, parts


def check_local_data(config: ExperimentConfig) -> None:
    """Check what can be known without a download: columns, label type, and that the split can be drawn.

    For ``digits`` and ``disk`` sources the dataset is read (its label column only is
    materialised) and the partition drawn as the run will draw it; a ``hub`` source is
    checked when a run loads it.
    """
    if config.dataset.source == "hub":
        return
    dataset: datasets.Dataset = load_source(config.dataset)
    split_indices(label_array(dataset, config.dataset.label), config)
