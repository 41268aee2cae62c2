"""Partitioners: every sample once, the right sizes, determinism, and the skew they promise."""

from __future__ import annotations

import numpy as np
import pytest

from fltest.config.schema import PartitionConfig
from fltest.data.partition import partition
from fltest.errors import InputError

LABELS = np.repeat(np.arange(10), 100)  # 1,000 samples, 10 balanced classes

CONFIGS = [
    PartitionConfig(method="iid"),
    PartitionConfig(method="dirichlet", alpha=0.5),
    PartitionConfig(method="shards", shards_per_client=2),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.method)
def test_every_sample_goes_to_exactly_one_client(config):
    parts = partition(LABELS, 20, config, np.random.default_rng(0))
    assert len(parts) == 20
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(len(LABELS)))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.method)
def test_same_seed_same_split_other_seed_other_split(config):
    first = partition(LABELS, 8, config, np.random.default_rng(7))
    again = partition(LABELS, 8, config, np.random.default_rng(7))
    other = partition(LABELS, 8, config, np.random.default_rng(8))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in partition(LABELS, 7, PartitionConfig(method="iid"), np.random.default_rng(0))]
    assert max(sizes) - min(sizes) <= 1


def _mean_top_class_share(parts):
    return float(np.mean([np.bincount(LABELS[p], minlength=10).max() / len(p) for p in parts]))


def test_dirichlet_skew_grows_as_alpha_shrinks():
    rng = np.random.default_rng
    skewed = _mean_top_class_share(partition(LABELS, 10, PartitionConfig(method="dirichlet", alpha=0.1), rng(1)))
    mild = _mean_top_class_share(partition(LABELS, 10, PartitionConfig(method="dirichlet", alpha=100.0), rng(1)))
    iid_share = _mean_top_class_share(partition(LABELS, 10, PartitionConfig(method="iid"), rng(1)))
    assert skewed > 0.4  # most of a client's data is one class
    assert mild < 0.2 and iid_share < 0.2  # near the balanced 0.1


def test_dirichlet_respects_min_samples():
    parts = partition(LABELS, 10, PartitionConfig(method="dirichlet", alpha=0.3, min_samples_per_client=30), np.random.default_rng(3))
    assert min(len(p) for p in parts) >= 30


def test_dirichlet_that_cannot_meet_min_samples_names_alpha():
    config = PartitionConfig(method="dirichlet", alpha=0.01, min_samples_per_client=90)
    with pytest.raises(InputError, match="partition.alpha"):
        partition(LABELS, 10, config, np.random.default_rng(0))


def test_shards_give_each_client_few_classes():
    parts = partition(LABELS, 10, PartitionConfig(method="shards", shards_per_client=2), np.random.default_rng(0))
    assert all(len(np.unique(LABELS[p])) <= 2 for p in parts)
    assert all(len(p) == 100 for p in parts)


def test_more_clients_than_samples_is_refused():
    with pytest.raises(InputError, match="clients: 2000 clients but only 1000"):
        partition(LABELS, 2000, PartitionConfig(method="iid"), np.random.default_rng(0))
