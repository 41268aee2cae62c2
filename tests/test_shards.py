"""Shard preparation and its cache: keys, reuse, determinism, memory-mapped vs in-memory."""

from __future__ import annotations

import pickle

import datasets
import numpy as np
import pytest
import yaml

from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import cache_key, prepare_shards
from fltest.data.shards import client_dataset, dataset_arrays
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
    "partition__self_balancing": True,
    "partition__shuffle": False,
}

# Every parameter of a few more partitioners, each against the same partitioner with its defaults.
PARTITIONER_CHANGES = [
    ({"method": "shard", "num_shards_per_partition": 2}, {"num_shards_per_partition": 3}),
    ({"method": "shard", "num_shards_per_partition": 2}, {"shard_size": 50}),
    ({"method": "shard", "num_shards_per_partition": 2}, {"keep_incomplete_shard": True}),
    ({"method": "shard", "num_shards_per_partition": 2}, {"shuffle": False}),
    ({"method": "pathological", "num_classes_per_partition": 2}, {"num_classes_per_partition": 3}),
    ({"method": "pathological", "num_classes_per_partition": 2}, {"class_assignment_mode": "deterministic"}),
    ({"method": "inner_dirichlet", "partition_sizes": [100] * 10, "alpha": 0.5}, {"partition_sizes": [90] * 10}),
    ({"method": "inner_dirichlet", "partition_sizes": [100] * 10, "alpha": 0.5}, {"alpha": [0.5] * 10}),
    ({"method": "size", "partition_sizes": [100] * 10}, {"partition_sizes": [100] * 9 + [99]}),
    ({"method": "continuous", "partition_by": "label", "strictness": 0.5}, {"strictness": 0.4}),
    ({"method": "iid"}, {"method": "linear"}),
    ({"method": "linear"}, {"method": "square"}),
    ({"method": "square"}, {"method": "exponential"}),
]


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_changing_any_shard_input_changes_the_key(field):
    assert cache_key(_config(), "mmap") != cache_key(_config(**{field: CHANGES[field]}), "mmap")


@pytest.mark.parametrize(("base", "change"), PARTITIONER_CHANGES, ids=lambda v: ",".join(f"{k}={v[k]}" for k in v))
def test_changing_any_partitioner_parameter_changes_the_key(base, change):
    assert cache_key(_config(partition=base), "mmap") != cache_key(_config(partition={**base, **change}), "mmap")


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


def test_several_feature_columns_are_flattened_and_joined_in_their_order(fresh_cache, tmp_path):
    """own-data.md: one feature column keeps each sample's shape; several are flattened and joined (in the config's
    order), and divided by ``scale``."""
    rows = 40
    datasets.Dataset.from_dict(
        {
            "patch": [[[i, i + 1], [i + 2, i + 3]] for i in range(rows)],  # 2x2 a sample
            "extra": [100.0 + i for i in range(rows)],  # a scalar a sample
            "label": [i % 2 for i in range(rows)],
        }
    ).save_to_disk(str(tmp_path / "data"))
    data = base_config()
    data.update(hooks=None, clients=2)
    data["dataset"] = {
        "source": "disk", "path": str(tmp_path / "data"), "features": ["extra", "patch"], "label": "label",
        "scale": 2.0, "test_fraction": 0.25,
    }  # fmt: skip
    shards, _ = prepare_shards(ExperimentConfig.model_validate(data))
    assert shards.feature_shape == (5,)
    for partition_id in range(2):
        x, y = shards.client_arrays(partition_id)
        for features, label in zip(x, y):
            i = int(features[0] * 2.0) - 100  # the row it came from, by its scalar
            assert features.tolist() == [(100.0 + i) / 2, i / 2, (i + 1) / 2, (i + 2) / 2, (i + 3) / 2]
            assert label == i % 2
    one_column, _ = prepare_shards(
        ExperimentConfig.model_validate({**data, "dataset": {**data["dataset"], "features": ["patch"]}})
    )
    assert one_column.feature_shape == (2, 2)  # one column keeps its shape


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
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "elsewhere"))
    rebuilt, reused = prepare_shards(_config())
    assert not reused
    for (x1, y1), i in zip(first, range(rebuilt.num_clients)):
        x2, y2 = rebuilt.client_arrays(i)
        assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert sum(shards.client_sizes) + shards.test_size == 1797
    assert shards.feature_shape == (8, 8) and shards.num_classes == 10  # digits' 8x8 images keep their shape
    assert first[0][0].shape == (shards.client_sizes[0], 8, 8)
    assert max(x.max() for x, _ in first) <= 1.0  # scaled by 16


def test_mmap_shards_are_memory_mapped_memory_shards_carry_their_data(fresh_cache):
    mapped, _ = prepare_shards(_config(), "mmap")
    in_memory, _ = prepare_shards(_config(), "memory")
    assert mapped.root != in_memory.root
    mapped_bytes = len(pickle.dumps(client_dataset(mapped, 0)))
    memory_shard = client_dataset(in_memory, 0)
    memory_bytes = len(pickle.dumps(memory_shard))
    assert mapped_bytes < 20_000  # a file path, not the data
    assert memory_bytes > memory_shard.num_rows * 64 * 4  # the float32 features themselves
    restored = pickle.loads(pickle.dumps(memory_shard))
    assert np.array_equal(restored.with_format("numpy")[:]["x0"], memory_shard.with_format("numpy")[:]["x0"])


HUB_CHANGES = {"revision": "0b2714987fbbf7e2e5a4bd3a46fe6ed3d4b6c1a2", "split": "test", "label": "fine_label"}


@pytest.mark.parametrize("field", sorted(HUB_CHANGES))
def test_a_hub_dataset_s_key_follows_its_revision_split_and_label(field):
    hub = {"source": "hub", "name": "uoft-cs/cifar10", "revision": "main", "features": ["img"]}
    changed = {**hub, field: HUB_CHANGES[field]}
    assert cache_key(_config(dataset=hub), "mmap") != cache_key(_config(dataset=changed), "mmap")


def _uint8_images(folder, rows: int = 240):
    """A CIFAR-shaped set in miniature: 8x8x3 uint8 images (Array3D) and 4 classes, written with save_to_disk."""
    rng = np.random.default_rng(0)
    features = datasets.Features(
        {"img": datasets.Array3D(shape=(8, 8, 3), dtype="uint8"), "label": datasets.ClassLabel(num_classes=4)}
    )
    images = rng.integers(0, 256, size=(rows, 8, 8, 3), dtype=np.uint8)
    datasets.Dataset.from_dict({"img": images, "label": np.arange(rows) % 4}, features=features).save_to_disk(
        str(folder)
    )
    return images


def _uint8_config(folder, **changes):
    return _config(
        dataset={"source": "disk", "path": str(folder), "features": ["img"], "label": "label", "scale": 255.0},
        clients=4,
        partition={"method": "iid"},
        **changes,
    )


def test_uint8_images_keep_their_dtype_and_shape_until_training(fresh_cache, tmp_path):
    images = _uint8_images(tmp_path / "images")
    shards, _ = prepare_shards(_uint8_config(tmp_path / "images"))
    shard = client_dataset(shards, 0)
    pixel = datasets.Value("uint8")  # the source's dtype and shape, not float rows
    assert shard.features["x0"] == datasets.Sequence(
        datasets.Sequence(datasets.Sequence(pixel, length=3), length=8), length=8
    )
    assert shard.features["y"] == datasets.ClassLabel(num_classes=4)
    stored = shard.with_format("numpy")[:]["x0"]
    assert stored.shape == (len(shard), 8, 8, 3)
    assert any(np.array_equal(stored[0], image) for image in images)  # a source row, byte for byte
    x, y = shards.client_arrays(0)
    assert (
        x.dtype == np.float64 and x.shape == (len(shard), 8, 8, 3) and y.dtype == np.int64
    )  # the images' shape, for a CNN
    assert np.array_equal(x, stored / 255.0)  # float64 only here, scaled
    assert shards.feature_shape == (8, 8, 3) and shards.num_classes == 4
    on_disk = sum(f.stat().st_size for f in (shards.root / "clients").rglob("*.arrow"))
    assert on_disk < 1.2 * images[: sum(shards.client_sizes)].nbytes  # uint8 values alone (float32 rows would be 4x)


def test_a_uint8_source_trains_on_the_reference_backend(fresh_cache, tmp_path):
    from fltest.runner import run_experiment

    _uint8_images(tmp_path / "images")
    comparison = run_experiment(_uint8_config(tmp_path / "images"), tmp_path / "results")
    assert [run["status"] for run in comparison["runs"]] == ["completed"]
    assert (tmp_path / "results" / "digits-demo" / "label_distribution.png").is_file()  # beside the report


def test_a_cache_folder_of_the_old_format_is_never_read(fresh_cache, monkeypatch):
    import fltest.data.shard_cache as shards_module

    current, version = cache_key(_config(), "mmap"), shards_module.FORMAT_VERSION
    monkeypatch.setattr(shards_module, "FORMAT_VERSION", 1)
    assert cache_key(_config(), "mmap") != current  # the format is part of the key
    monkeypatch.setattr(shards_module, "FORMAT_VERSION", version)
    stale = fresh_cache / "fltest-shards" / current  # a folder under today's key that says format 1: not read
    (stale / "clients" / "00000").mkdir(parents=True)
    (stale / "meta.json").write_text(
        '{"num_clients": 10, "num_features": 64, "num_classes": 10, "client_sizes": [1], "test_size": 1}'
    )
    shards, reused = prepare_shards(_config())
    assert not reused and sum(shards.client_sizes) + shards.test_size == 1797
    assert len(client_dataset(shards, 0)) == shards.client_sizes[0]


def test_prepare_draws_the_label_distribution_of_the_shards_it_wrote(fresh_cache, monkeypatch):
    """label_distribution.png (results.md): each client's samples per class, as its shard holds them. Flower Datasets
    draws it; its drawing function is watched (and still runs) for the counts it drew."""
    from flwr_datasets import visualization

    drawn = []

    def watched(*args, **kwargs):
        fig, axis, counts = real(*args, **kwargs)
        drawn.append(counts)
        return fig, axis, counts

    real = visualization.plot_label_distributions
    monkeypatch.setattr(visualization, "plot_label_distributions", watched)
    shards, _ = prepare_shards(_config())
    assert shards.label_plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (counts,) = drawn
    assert counts.shape == (shards.num_clients, shards.num_classes)
    for partition_id, row in enumerate(counts.to_numpy()):
        _, labels = shards.client_arrays(partition_id)
        assert row.tolist() == np.bincount(labels, minlength=shards.num_classes).tolist(), partition_id


def test_a_shard_read_with_pyarrow_alone_is_the_datasets_librarys_bit_for_bit():
    """What NVFlare's clients and the deployment's ClientApps read (pyarrow) equals what datasets loads, every client."""
    config = ExperimentConfig.model_validate({**base_config(), "clients": 3})
    shards, _ = prepare_shards(config)
    for partition_id in range(3):
        x, y = shards.client_arrays(partition_id)
        x2, y2 = dataset_arrays(client_dataset(shards, partition_id), shards.scale)
        assert x.dtype == x2.dtype and y.dtype == y2.dtype and np.array_equal(x, x2) and np.array_equal(y, y2)
    x, y = shards.test_arrays()
    x2, y2 = dataset_arrays(datasets.load_from_disk(str(shards.test_folder)), shards.scale)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_max_samples_caps_the_rows_read(fresh_cache):
    """own-data.md: ``max_samples`` caps the rows read; the held-out test rows are ``test_fraction`` of those."""
    shards, _ = prepare_shards(_config(dataset__max_samples=500))
    assert sum(shards.client_sizes) + shards.test_size == 500
    assert shards.test_size == 100  # test_fraction 0.2 of the 500


def test_a_disk_that_fills_while_shards_are_written_is_one_line_naming_the_cache_and_nothing_is_left(
    fresh_cache, monkeypatch, capsys
):
    """The Ray head's 64 MB home once held the datasets cache: a CIFAR-sized set ended with a traceback of the datasets
    library. Here the save fails as a full disk does (ENOSPC): ``fltest prepare`` says where in one line, exit 1."""
    import errno

    from fltest import cli
    from fltest.data import shards as shard_writer

    def full_disk(staging, *args, **kwargs):  # the first client's shard half-written, then the disk is full
        (staging / "clients" / "00000").mkdir(parents=True)
        (staging / "clients" / "00000" / "data-00000-of-00001.arrow").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shard_writer, "_write_shards", full_disk)
    config = base_config() | {"hooks": None}
    path = fresh_cache.parent / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert cli.main(["prepare", str(path)]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        f"fltest: error: the shards of 10 clients do not fit in {fresh_cache / 'fltest-shards'}: no space left on that "
        "device (set HF_DATASETS_CACHE to a folder on a larger one)"
    ], error
    assert list((fresh_cache / "fltest-shards").iterdir()) == []  # no half-written set
