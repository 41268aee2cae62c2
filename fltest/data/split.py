"""Which rows are held out for the test and which each client trains on: from the label column alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import datasets
import numpy as np

from fltest.config.schema import ExperimentConfig
from fltest.data.partition import client_positions, partition_table, partitioner_on
from fltest.data.sources import label_array, load_source, split_sizes
from fltest.errors import FieldError

if TYPE_CHECKING:
    from flwr_datasets.partitioner import Partitioner


@dataclass(frozen=True)
class Split:
    """The rows of the source each part takes: the test rows, the training rows, each client's share of them."""

    train_rows: np.ndarray  # shuffled (as Flower Datasets' FederatedDataset shuffles before it partitions)
    test_rows: np.ndarray  # sorted
    parts: list[np.ndarray]  # positions in ``train_rows``, sorted, one array a client
    partitioner: Partitioner  # the flwr-datasets partitioner that drew ``parts``, on the training rows' labels (and partition_by column)

    def client_rows(self, client: int) -> np.ndarray:
        """Client ``client``'s rows of the source, in source order."""
        return np.sort(self.train_rows[self.parts[client]])


def _partition_columns(source: datasets.Dataset, config: ExperimentConfig, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The ``partition_by`` column of the training rows, for the partitioners that read one."""
    by = config.partition.by_column()
    if by is None:
        return {}
    if by not in source.column_names:
        raise FieldError(
            f"partition.partition_by: column {by!r} not in the dataset (columns: {', '.join(source.column_names)})"
        )
    return {by: np.asarray(source.with_format("numpy", columns=[by])[:][by])[rows]}


def split_rows(source: datasets.Dataset, config: ExperimentConfig, labels: np.ndarray | None = None) -> Split:
    """The seeded split of ``source``: test rows held out, the rest partitioned over the clients.

    ``labels``: the source's label column, if already read. Raises :class:`FieldError` naming
    the field when the split cannot be drawn (too few samples, a partition that leaves a client short).
    """
    labels = label_array(source, config.dataset.label) if labels is None else labels
    rng = np.random.default_rng([config.seed, 0])
    num_train, num_test = split_sizes(len(labels), config.dataset)
    if num_train < 1:
        raise FieldError(f"dataset.test_fraction: leaves no training samples out of {len(labels)}")
    order = rng.permutation(len(labels))[: num_train + num_test]
    test_rows, train_rows = np.sort(order[:num_test]), order[num_test:]
    label_feature = source.features[config.dataset.label]
    table = partition_table(
        labels[train_rows], config.dataset.label, _partition_columns(source, config, train_rows), label_feature
    )
    partitioner = partitioner_on(table, config.clients, config.partition, config.dataset.label, config.seed)
    parts = client_positions(partitioner, config.clients, config.partition)
    return Split(train_rows=train_rows, test_rows=test_rows, parts=parts, partitioner=partitioner)


def check_local_data(config: ExperimentConfig) -> None:
    """Check what can be known without a download: columns, label type, and that the split can be drawn.

    For ``digits`` and ``disk`` sources the dataset is read (its label column only is
    materialised) and the partition drawn as the run will draw it; a ``hub`` source is
    checked when a run loads it.
    """
    if config.dataset.source == "hub":
        return
    split_rows(load_source(config.dataset), config)
