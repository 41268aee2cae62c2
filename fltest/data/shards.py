"""Prepared client shards, cached as Arrow files in the Hugging Face datasets cache.

A shard set lives in ``<HF datasets cache>/fltest-shards/<key>/``: ``meta.json``,
``test/`` and ``clients/<i>/``, each folder written by ``save_to_disk``. The key
hashes everything that changes the shards, including the storage variant: ``mmap``
shards are memory-mapped when loaded (one machine), ``memory`` shards are read fully
into memory so that they pickle with their data (a Ray cluster).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import datasets
import numpy as np

from fltest.config.schema import ExperimentConfig
from fltest.data.sources import load_source, source_fingerprint, to_arrays
from fltest.data.split import split_indices

Storage = Literal["mmap", "memory"]
FORMAT_VERSION = 1
_FEATURES = "x"
_LABEL = "y"


def cache_root() -> Path:
    """The folder that holds every shard set: under the Hugging Face datasets cache, as an absolute path.

    Shard sets are read by other processes (NVFlare clients, Ray workers) in other working
    folders, so a relative ``HF_HOME`` is taken against this process's working folder.
    """
    return Path(datasets.config.HF_DATASETS_CACHE).absolute() / "fltest-shards"


def cache_key(config: ExperimentConfig, storage: Storage) -> str:
    """A hash of every input that changes the prepared shards, and of the storage variant."""
    inputs = {
        "format": FORMAT_VERSION,
        "dataset": config.dataset.model_dump(mode="json"),
        "dataset_fingerprint": source_fingerprint(config.dataset),
        "partition": config.partition.model_dump(mode="json"),
        "clients": config.clients,
        "seed": config.seed,
        "storage": storage,
    }
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class ShardSet:
    """A prepared, cached shard set; small enough to pickle (it holds paths, not data)."""

    root: Path
    key: str
    storage: Storage
    num_clients: int
    num_features: int
    num_classes: int
    client_sizes: tuple[int, ...]
    test_size: int

    def _load(self, folder: Path) -> datasets.Dataset:
        """Load one saved folder: memory-mapped, or fully into memory."""
        return datasets.load_from_disk(str(folder), keep_in_memory=self.storage == "memory")

    def client_dataset(self, partition_id: int) -> datasets.Dataset:
        """Client ``partition_id``'s shard as a ``Dataset`` (columns ``x``, ``y``)."""
        return self._load(self.root / "clients" / f"{partition_id:05d}")

    def test_dataset(self) -> datasets.Dataset:
        """The held-out test split as a ``Dataset``."""
        return self._load(self.root / "test")

    def test_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The test split as float64 features and int64 labels."""
        return dataset_arrays(self.test_dataset())

    def client_arrays(self, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``partition_id``'s shard as float64 features and int64 labels."""
        return dataset_arrays(self.client_dataset(partition_id))


def dataset_arrays(dataset: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """A shard ``Dataset`` as float64 features and int64 labels (what the models train on)."""
    view = dataset.with_format("numpy")
    return np.asarray(view[_FEATURES], dtype=np.float64), np.asarray(view[_LABEL], dtype=np.int64)


def _split(config: ExperimentConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Load the source, hold out the test split and partition the rest; all seeded."""
    source = load_source(config.dataset)
    features, labels = to_arrays(source, config.dataset.features, config.dataset.label, config.dataset.scale)
    train_rows, test_rows, parts = split_indices(labels, config)
    return features[train_rows], labels[train_rows], features[test_rows], labels[test_rows], parts


def _save(folder: Path, features: np.ndarray, labels: np.ndarray) -> None:
    """Write one shard with ``save_to_disk``: fixed-length float32 rows and int64 labels."""
    schema = datasets.Features(
        {
            _FEATURES: datasets.Sequence(datasets.Value("float32"), length=features.shape[1]),
            _LABEL: datasets.Value("int64"),
        }
    )
    dataset = datasets.Dataset.from_dict({_FEATURES: features, _LABEL: labels}, features=schema)
    dataset.save_to_disk(str(folder))


def _read_meta(root: Path, key: str, storage: Storage) -> ShardSet:
    meta = json.loads((root / "meta.json").read_text())
    return ShardSet(
        root=root,
        key=key,
        storage=storage,
        num_clients=meta["num_clients"],
        num_features=meta["num_features"],
        num_classes=meta["num_classes"],
        client_sizes=tuple(meta["client_sizes"]),
        test_size=meta["test_size"],
    )


def prepare_shards(config: ExperimentConfig, storage: Storage = "mmap") -> tuple[ShardSet, bool]:
    """Return the experiment's shard set, building and caching it if needed.

    Returns ``(shards, reused)`` where ``reused`` says the cache already held them.
    The set is written to a temporary folder and renamed into place, so a crash
    never leaves a half-written set under the final key.
    """
    key = cache_key(config, storage)
    root = cache_root() / key
    if (root / "meta.json").is_file():
        return _read_meta(root, key, storage), True

    train_x, train_y, test_x, test_y, parts = _split(config)
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    staging = root.with_name(f"{key}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    datasets.disable_progress_bars()
    try:
        _save(staging / "test", test_x, test_y)
        for client, indices in enumerate(parts):
            _save(staging / "clients" / f"{client:05d}", train_x[indices], train_y[indices])
        meta = {
            "num_clients": config.clients,
            "num_features": int(train_x.shape[1]),
            "num_classes": num_classes,
            "client_sizes": [int(len(p)) for p in parts],
            "test_size": int(len(test_y)),
            "config": {"dataset": config.dataset.model_dump(mode="json"), "partition": config.partition.model_dump(mode="json"), "seed": config.seed},
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            staging.rename(root)
        except OSError:
            if not (root / "meta.json").is_file():  # not a concurrent writer finishing first
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        datasets.enable_progress_bars()
    return _read_meta(root, key, storage), False
