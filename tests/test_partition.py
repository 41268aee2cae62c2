"""Partitioners: Flower Datasets' own, by name and parameters; the same partition as flwr-datasets gives, seeded."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
from flwr_datasets import partitioner as fp
from pydantic import TypeAdapter

from fltest.config.partitions import PARTITION_METHODS, PartitionConfig
from fltest.data.partition import ROW_COLUMN, partition, partition_table
from fltest.errors import InputError

LABELS = np.repeat(np.arange(10), 100)  # 1,000 samples, 10 balanced classes
WRITERS = np.arange(1000) % 6  # a natural id: 6 writers
SCORES = np.linspace(0.0, 1.0, 1000)  # a numeric column for the continuous partitioner
CLIENTS = 6  # exponential sizes: e**5 times the smallest still leaves it rows
SEED = 7
_config = TypeAdapter(PartitionConfig).validate_python

# Each method as FLTest's config names it, and the flwr-datasets partitioner built by hand from it.
CASES = {
    "iid": ({"method": "iid"}, lambda: fp.IidPartitioner(num_partitions=CLIENTS)),
    "linear": ({"method": "linear"}, lambda: fp.LinearPartitioner(num_partitions=CLIENTS)),
    "square": ({"method": "square"}, lambda: fp.SquarePartitioner(num_partitions=CLIENTS)),
    "exponential": ({"method": "exponential"}, lambda: fp.ExponentialPartitioner(num_partitions=CLIENTS)),
    "size": ({"method": "size", "partition_sizes": [50, 100, 150, 200, 50, 100]},
             lambda: fp.SizePartitioner(partition_sizes=[50, 100, 150, 200, 50, 100])),
    "dirichlet": ({"method": "dirichlet", "alpha": 0.5, "min_samples_per_client": 10},
                  lambda: fp.DirichletPartitioner(num_partitions=CLIENTS, partition_by="label", alpha=0.5, min_partition_size=10, seed=SEED)),
    "inner_dirichlet": ({"method": "inner_dirichlet", "partition_sizes": [150] * 6, "alpha": 0.5},
                        lambda: fp.InnerDirichletPartitioner(partition_sizes=[150] * 6, partition_by="label", alpha=0.5, seed=SEED)),
    "shard": ({"method": "shard", "num_shards_per_partition": 2},
              lambda: fp.ShardPartitioner(num_partitions=CLIENTS, partition_by="label", num_shards_per_partition=2, seed=SEED)),
    "pathological": ({"method": "pathological", "num_classes_per_partition": 2},
                     lambda: fp.PathologicalPartitioner(num_partitions=CLIENTS, partition_by="label", num_classes_per_partition=2, seed=SEED)),
    "natural_id": ({"method": "natural_id", "partition_by": "writer"}, lambda: fp.NaturalIdPartitioner(partition_by="writer")),
    "continuous": ({"method": "continuous", "partition_by": "score", "strictness": 0.5},
                   lambda: fp.ContinuousPartitioner(num_partitions=CLIENTS, partition_by="score", strictness=0.5, seed=SEED)),
}  # fmt: skip


def _table():
    return partition_table(LABELS, "label", {"writer": WRITERS, "score": SCORES})


def _flwr_parts(make) -> list[np.ndarray]:
    """The partition flwr-datasets draws on a plain table of the same columns (no format: as its users build one)."""
    partitioner = make()
    partitioner.dataset = datasets.Dataset.from_dict(
        {ROW_COLUMN: np.arange(len(LABELS)), "label": LABELS, "writer": WRITERS, "score": SCORES}
    )
    return [np.sort(np.asarray(partitioner.load_partition(i)[ROW_COLUMN])) for i in range(CLIENTS)]


def test_every_method_flwr_datasets_names_is_covered():
    assert sorted(CASES) == sorted(PARTITION_METHODS)


@pytest.mark.parametrize("method", sorted(CASES))
def test_the_partition_is_flwr_datasets_own(method):
    config, make = CASES[method]
    ours = partition(_table(), CLIENTS, _config(config), "label", SEED)
    theirs = _flwr_parts(make)
    assert len(ours) == CLIENTS and all(np.array_equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("method", sorted(CASES))
def test_same_seed_same_partition(method):
    config = _config(CASES[method][0])
    first = partition(_table(), CLIENTS, config, "label", SEED)
    again = partition(_table(), CLIENTS, config, "label", SEED)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("method", ["dirichlet", "inner_dirichlet", "shard", "pathological", "continuous"])
def test_another_seed_another_partition(method):
    config = _config(CASES[method][0])
    first = partition(_table(), CLIENTS, config, "label", SEED)
    other = partition(_table(), CLIENTS, config, "label", SEED + 1)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("method", sorted(CASES))
def test_no_sample_goes_to_two_clients(method):
    rows = np.concatenate(partition(_table(), CLIENTS, _config(CASES[method][0]), "label", SEED))
    assert len(np.unique(rows)) == len(rows)


@pytest.mark.parametrize("method", ["iid", "dirichlet", "natural_id", "continuous"])
def test_every_sample_goes_to_exactly_one_client(method):
    parts = partition(_table(), CLIENTS, _config(CASES[method][0]), "label", SEED)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(LABELS)))


def test_fltest_s_earlier_spelling_of_shards_still_works():
    earlier = partition(_table(), CLIENTS, _config({"method": "shards", "shards_per_client": 2}), "label", SEED)
    assert all(np.array_equal(a, b) for a, b in zip(earlier, _flwr_parts(CASES["shard"][1])))
    ten = partition(_table(), 10, _config({"method": "shards", "shards_per_client": 2}), "label", SEED)
    assert all(len(np.unique(LABELS[p])) <= 2 for p in ten) and all(
        len(p) == 100 for p in ten
    )  # shards of one class each


def test_dirichlet_skew_grows_as_alpha_shrinks():
    labels = np.random.default_rng(0).permutation(LABELS)  # shuffled, as the split hands the training rows over
    table = partition_table(labels, "label")

    def mean_top_class_share(config):
        parts = partition(table, 10, _config(config), "label", 1)
        return float(np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]))

    skewed = mean_top_class_share({"method": "dirichlet", "alpha": 0.1})
    mild = mean_top_class_share({"method": "dirichlet", "alpha": 100.0})
    iid_share = mean_top_class_share({"method": "iid"})
    assert skewed > 0.4  # most of a client's data is one class
    assert mild < 0.2 and iid_share < 0.2  # near the balanced 0.1


def test_dirichlet_respects_min_samples():
    parts = partition(
        _table(), 10, _config({"method": "dirichlet", "alpha": 0.3, "min_samples_per_client": 30}), "label", 3
    )
    assert min(len(p) for p in parts) >= 30


def test_dirichlet_that_cannot_meet_min_samples_names_alpha():
    with pytest.raises(
        InputError, match=r"partition.alpha: Dirichlet\(0.01\) left a client with fewer than 90 samples"
    ):
        partition(
            _table(), 10, _config({"method": "dirichlet", "alpha": 0.01, "min_samples_per_client": 90}), "label", 0
        )


def test_natural_id_needs_one_client_per_id():
    with pytest.raises(InputError, match="clients: 5, but partition.partition_by='writer' has 6 distinct values"):
        partition(_table(), 5, _config({"method": "natural_id", "partition_by": "writer"}), "label", 0)


def test_more_clients_than_samples_is_refused():
    with pytest.raises(InputError, match="clients: 2000 clients but only 1000"):
        partition(_table(), 2000, _config({"method": "iid"}), "label", 0)


def test_an_unknown_method_or_parameter_is_one_line_naming_the_field(write_config):
    from fltest.config.loader import load_config
    from tests.conftest import base_config

    for partition_config, expected in [
        ({"method": "zipf"}, f"partition.method: 'zipf': expected one of {', '.join(PARTITION_METHODS)}"),
        ({"method": "dirichlet", "alpha": 0.5, "beta": 1}, "partition.beta: unknown key"),
        (
            {"method": "shard", "num_shards_per_partition": 0},
            "partition.num_shards_per_partition: Input should be greater than 0",
        ),
    ]:
        path = write_config({**base_config(), "partition": partition_config})
        with pytest.raises(InputError) as error:
            load_config(path)
        assert str(error.value) == f"{path}: {expected}"


@pytest.mark.parametrize("method", sorted(CASES))
def test_min_samples_per_client_is_a_floor_for_every_method(method):
    """own-data.md: ``min_samples_per_client`` holds for every method: a partition that leaves a client below it is
    refused naming the field (Dirichlet redraws first, as flwr-datasets does), never returned."""
    config, _ = CASES[method]
    smallest = min(len(part) for part in partition(_table(), CLIENTS, _config(config), "label", SEED))
    floor = {**config, "min_samples_per_client": smallest + 1}
    try:
        parts = partition(_table(), CLIENTS, _config(floor), "label", SEED)
    except InputError as refused:
        assert "min_samples_per_client" in str(refused) or "fewer than" in str(refused)
    else:
        assert min(len(part) for part in parts) >= smallest + 1
