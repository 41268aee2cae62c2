"""Split the training rows over clients with Flower Datasets' partitioners, from the label column alone.

The partitioner sees a small table: the training rows' labels (and the ``partition_by`` column
of the partitioners that read one) in the shuffled order the split gives, plus each row's
position. A client's rows are the positions of its partition, so the features are never read
here; the same table, seed and parameters give the same partition as flwr-datasets itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import datasets
import numpy as np
import pyarrow as pa

from fltest.config.partitions import METHOD_ALIASES, PartitionConfig
from fltest.errors import FieldError

if TYPE_CHECKING:
    from flwr_datasets.partitioner import Partitioner

ROW_COLUMN = "__fltest_row__"  # each training row's position in the partition table


def _canonical(method: str) -> str:
    """A method's one name (FLTest's ``shards`` and flwr-datasets' dashed spellings map to it)."""
    return METHOD_ALIASES.get(method, method)


def flwr_partitioner(config: PartitionConfig, num_clients: int, label: str, seed: int) -> Partitioner:
    """The flwr-datasets partitioner ``config`` names, built with its parameters for ``num_clients`` clients.

    ``label`` is the label column (``partition_by`` of the label-based partitioners); ``seed``
    seeds the partitioners that draw at random (the others follow the shuffled row order).
    flwr-datasets is imported here, not with this module: its package imports pandas, seaborn and
    matplotlib (about 3 s), and every process that reads a shard imports this module.
    """
    from flwr_datasets import partitioner as fp

    return getattr(fp, config.flwr_class)(**config.flwr_params(num_clients, label, seed))


def partition_table(
    labels: np.ndarray,
    label: str,
    columns: Mapping[str, np.ndarray] | None = None,
    label_feature: datasets.features.FeatureType | None = None,
) -> datasets.Dataset:
    """The table a partitioner sees: ``label``, any ``columns`` it partitions by, and each row's position.

    ``label_feature``: the source's label type; a ``ClassLabel`` keeps its class names (the plot's legend).
    The table is formatted as Arrow, so that ``table[column]``, which flwr-datasets' partitioners and
    plot read, is one Arrow array: unformatted, datasets 4 gives a lazy column that numpy and
    pandas read row by row (3 of the 5 s a 60,000-row partition and plot took).
    """
    data = {ROW_COLUMN: np.arange(len(labels)), label: labels, **(columns or {})}
    features = datasets.Features.from_arrow_schema(pa.table(data).schema)
    if isinstance(label_feature, datasets.ClassLabel):
        features[label] = label_feature
    return datasets.Dataset.from_dict(data, features=features).with_format("arrow")


def _check_drawable(config: PartitionConfig, num_rows: int, num_clients: int) -> None:
    """The checks whose failures FLTest words itself (flwr-datasets' own messages name no config field)."""
    method = _canonical(config.method)
    if num_clients > num_rows:
        raise FieldError(f"clients: {num_clients} clients but only {num_rows} training samples")
    if method == "shard" and config.num_shards_per_partition is not None:
        shards = num_clients * config.num_shards_per_partition
        if shards > num_rows:
            raise FieldError(
                f"partition.shards_per_client: {shards} shards need at least as many training samples, there are {num_rows}"
            )
    if method in ("size", "inner_dirichlet"):
        if len(config.partition_sizes) != num_clients:
            raise FieldError(
                f"partition.partition_sizes: {len(config.partition_sizes)} sizes for {num_clients} clients"
            )
        if sum(config.partition_sizes) > num_rows:
            raise FieldError(
                f"partition.partition_sizes: {sum(config.partition_sizes)} rows asked, there are {num_rows} training samples"
            )


def partition(
    table: datasets.Dataset, num_clients: int, config: PartitionConfig, label: str, seed: int
) -> list[np.ndarray]:
    """Each client's training-row positions (sorted), as flwr-datasets partitions ``table`` (:func:`partition_table`)."""
    return client_positions(partitioner_on(table, num_clients, config, label, seed), num_clients, config)


def partitioner_on(
    table: datasets.Dataset, num_clients: int, config: PartitionConfig, label: str, seed: int
) -> Partitioner:
    """The partitioner ``config`` names, given ``table`` (:func:`partition_table`); checks FLTest words itself first."""
    _check_drawable(config, len(table), num_clients)
    partitioner = flwr_partitioner(config, num_clients, label, seed)
    partitioner.dataset = table
    return partitioner


def client_positions(partitioner: Partitioner, num_clients: int, config: PartitionConfig) -> list[np.ndarray]:
    """Each client's training-row positions (sorted) from ``partitioner`` (:func:`partitioner_on`).

    flwr-datasets draws once and keeps the draw in the partitioner, so drawing the label plot from
    the same partitioner afterwards repeats no draw. A partition that cannot be drawn is one
    :class:`FieldError` naming the field.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the Dirichlet partitioner warns at every redraw
            if partitioner.num_partitions != num_clients:
                raise FieldError(
                    f"clients: {num_clients}, but partition.partition_by={config.by_column()!r} "
                    f"has {partitioner.num_partitions} distinct values (one client each)"
                )
            parts = [
                np.sort(np.asarray(partitioner.load_partition(i)[ROW_COLUMN], dtype=np.int64))
                for i in range(num_clients)
            ]
    except ValueError as exc:
        if _canonical(config.method) == "dirichlet":
            raise FieldError(
                f"partition.alpha: Dirichlet({config.alpha}) left a client with fewer than "
                f"{config.min_samples_per_client} samples in 10 draws; raise alpha or lower clients"
            ) from None
        raise FieldError(f"partition: {config.method}: {str(exc).strip().splitlines()[0]}") from None
    smallest = min(len(p) for p in parts)
    if smallest < config.min_samples_per_client:
        raise FieldError(
            f"clients: a client gets {smallest} samples, fewer than partition.min_samples_per_client={config.min_samples_per_client}"
        )
    return parts
