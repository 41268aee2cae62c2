"""Shard preparation and its cache: keys, reuse, determinism, memory-mapped vs in-memory."""

from __future__ import annotations

import pickle

import datasets
import numpy as np
import pytest

from fltest.config.schema import ExperimentConfig
from fltest.data.shards import cache_key, prepare_shards
from tests.conftest import base_config


def _config(**changes) -> ExperimentConfig:
    data = base_config()
    data["hooks"] = None
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return ExperimentConfig.model_validate(data)


CHANGES = {
    "seed": 43,
    "clients": 11,
    "dataset__test_fraction": 0.3,
    "dataset__scale": 255.0,
    "dataset__max_samples": 1000,
    "dataset__features": ["image", "image"],
    "partition": {"method": "iid"},
    "partition__alpha": 0.5,
    "partition__min_samples_per_client": 2,
}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_changing_any_shard_input_changes_the_key(field):
    assert cache_key(_config(), "mmap") != cache_key(_config(**{field: CHANGES[field]}), "mmap")


def test_training_settings_do_not_change_the_key():
    changed = _config(training={"rounds": 9, "local_steps": 3, "learning_rate": 0.01})
    assert cache_key(_config(), "mmap") == cache_key(changed, "mmap")


def test_memory_and_mmap_variants_have_their_own_keys():
    assert cache_key(_config(), "mmap") != cache_key(_config(), "memory")


def test_disk_source_key_follows_the_folder_content(tmp_path):
    def disk_config(folder):
        data = base_config()
        data["hooks"] = None
        data["dataset"] = {"source": "disk", "path": str(folder), "features": ["pixels"], "label": "label"}
        return ExperimentConfig.model_validate(data)

    first, second = tmp_path / "a", tmp_path / "b"
    datasets.Dataset.from_dict({"pixels": [[0.0, 1.0]] * 40, "label": [0, 1] * 20}).save_to_disk(str(first))
    datasets.Dataset.from_dict({"pixels": [[1.0, 1.0]] * 40, "label": [0, 1] * 20}).save_to_disk(str(second))
    assert cache_key(disk_config(first), "mmap") != cache_key(disk_config(second), "mmap")


def test_second_prepare_reuses_the_cache(fresh_cache):
    shards, reused = prepare_shards(_config())
    assert not reused
    assert shards.root.parent.parent == fresh_cache
    again, reused_again = prepare_shards(_config())
    assert reused_again and again == shards
    assert [p.name for p in shards.root.parent.iterdir()] == [shards.key]  # no staging folder left


def test_shards_are_deterministic_and_cover_the_training_split(fresh_cache, tmp_path, monkeypatch):
    shards, _ = prepare_shards(_config())
    first = [shards.client_arrays(i) for i in range(shards.num_clients)]
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "elsewhere")
    rebuilt, reused = prepare_shards(_config())
    assert not reused
    for (x1, y1), i in zip(first, range(rebuilt.num_clients)):
        x2, y2 = rebuilt.client_arrays(i)
        assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert sum(shards.client_sizes) + shards.test_size == 1797
    assert shards.num_features == 64 and shards.num_classes == 10
    assert max(x.max() for x, _ in first) <= 1.0  # scaled by 16


def test_mmap_shards_are_memory_mapped_memory_shards_carry_their_data(fresh_cache):
    mapped, _ = prepare_shards(_config(), "mmap")
    in_memory, _ = prepare_shards(_config(), "memory")
    assert mapped.root != in_memory.root
    mapped_bytes = len(pickle.dumps(mapped.client_dataset(0)))
    memory_shard = in_memory.client_dataset(0)
    memory_bytes = len(pickle.dumps(memory_shard))
    assert mapped_bytes < 20_000  # a file path, not the data
    assert memory_bytes > memory_shard.num_rows * 64 * 4  # the float32 features themselves
    restored = pickle.loads(pickle.dumps(memory_shard))
    assert np.array_equal(restored.with_format("numpy")["x"], memory_shard.with_format("numpy")["x"])


HUB_CHANGES = {"revision": "0b2714987fbbf7e2e5a4bd3a46fe6ed3d4b6c1a2", "split": "test", "label": "fine_label"}


@pytest.mark.parametrize("field", sorted(HUB_CHANGES))
def test_a_hub_dataset_s_key_follows_its_revision_split_and_label(field):
    hub = {"source": "hub", "name": "uoft-cs/cifar10", "revision": "main", "features": ["img"]}
    changed = {**hub, field: HUB_CHANGES[field]}
    assert cache_key(_config(dataset=hub), "mmap") != cache_key(_config(dataset=changed), "mmap")
