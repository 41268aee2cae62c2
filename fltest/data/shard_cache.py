"""Where shard sets are cached, and finding one there, without importing the datasets library.

A run whose shard set is cached reads nothing else of it before its framework starts, so finding the
set must not cost that library's import (0.7 s of every run's start, measured): the set's key hashes
the config, and its folder lies under the Hugging Face datasets cache, found by the same environment
variables the datasets library reads. Only a ``disk`` dataset, whose content is in the key, is read
(with that library) to find its set. :mod:`fltest.data.shards` writes a set the cache misses.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fltest.config.schema import DatasetConfig, ExperimentConfig
from fltest.data.shard_set import ShardSet, Storage

if TYPE_CHECKING:
    import datasets

FORMAT_VERSION = 3  # 3: meta.json holds the feature shape; 2: the source's rows and dtypes; 1: float32 rows. In the key and meta.json
CACHE_FOLDER = "fltest-shards"  # under the Hugging Face datasets cache


def datasets_cache_folder() -> Path:
    """The Hugging Face datasets cache, as ``datasets.config.HF_DATASETS_CACHE`` (datasets 5.2) finds it.

    ``HF_DATASETS_CACHE``, else ``<HF_HOME>/datasets``, ``HF_HOME`` defaulting to
    ``<XDG_CACHE_HOME or ~/.cache>/huggingface`` (a leading ``~`` expanded). tests/test_shard_cache.py
    checks that it agrees with the library under every combination of these variables.
    """
    home = os.path.expanduser(
        os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"), "huggingface"))
    )
    return Path(os.getenv("HF_DATASETS_CACHE", os.path.join(home, "datasets")))


def cache_root() -> Path:
    """The folder that holds every shard set: under the Hugging Face datasets cache, as an absolute path.

    Shard sets are read by other processes (NVFlare clients, Ray workers) in other working
    folders, so a relative ``HF_HOME`` is taken against this process's working folder.
    """
    return datasets_cache_folder().absolute() / CACHE_FOLDER


def content_in_key(config: DatasetConfig) -> bool:
    """Whether the source's content is part of the shards' cache key (a ``disk`` dataset, which can change)."""
    return config.source == "disk"


def source_fingerprint(config: DatasetConfig, dataset: datasets.Dataset | None = None) -> str | None:
    """A fingerprint of a ``disk`` dataset's content (its loaded split), so that a changed folder changes the cache key.

    ``dataset``: the source as :func:`fltest.data.sources.load_source` loaded it (read again when not given).
    """
    if not content_in_key(config):
        return None
    if dataset is None:
        from fltest.data.sources import load_source  # the datasets library: a disk dataset only

        dataset = load_source(config)
    return dataset._fingerprint


def cache_key(config: ExperimentConfig, storage: Storage, fingerprint: str | None = None) -> str:
    """A hash of every input that changes the prepared shards (every partitioner parameter), the format and the storage variant.

    ``fingerprint``: the source's (:func:`source_fingerprint`), if already known.
    """
    inputs = {
        "format": FORMAT_VERSION,
        "dataset": config.dataset.model_dump(mode="json"),
        "dataset_fingerprint": fingerprint if fingerprint is not None else source_fingerprint(config.dataset),
        "partition": config.partition.model_dump(mode="json"),
        "clients": config.clients,
        "seed": config.seed,
        "storage": storage,
    }
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def locate(config: ExperimentConfig, storage: Storage, source: datasets.Dataset | None = None) -> tuple[str, Path]:
    """The shard set's cache key and folder (the source is read only if its content is in the key and not given)."""
    key = cache_key(config, storage, source_fingerprint(config.dataset, source))
    return key, cache_root() / key


def read_meta(root: Path, key: str, storage: Storage) -> ShardSet | None:
    """The shard set in ``root``, or ``None`` when it is missing or of another format version."""
    try:
        meta = json.loads((root / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT_VERSION:
        return None
    return ShardSet(
        root=root,
        key=key,
        storage=storage,
        num_clients=meta["num_clients"],
        feature_shape=tuple(meta["feature_shape"]),
        scale=meta["scale"],
        num_classes=meta["num_classes"],
        client_sizes=tuple(meta["client_sizes"]),
        test_size=meta["test_size"],
    )


def cached_shards(
    config: ExperimentConfig, storage: Storage = "mmap", source: datasets.Dataset | None = None
) -> ShardSet | None:
    """The experiment's shard set if the cache holds it, else ``None``.

    The source is read only when its content is in the key (a disk dataset; ``source``, if already
    read): reading the digits from scikit-learn alone was 1.4 s of every run's start with the shards cached.
    """
    key, root = locate(config, storage, source)
    return read_meta(root, key, storage)


def prepare_shards(config: ExperimentConfig, storage: Storage = "mmap") -> tuple[ShardSet, bool]:
    """Return the experiment's shard set, from the cache or built into it (:func:`fltest.data.shards.write_shard_set`).

    Returns ``(shards, reused)`` where ``reused`` says the cache already held them. The datasets library is
    imported only to build a set or to fingerprint a ``disk`` dataset, which is then read once.
    """
    source = None
    if content_in_key(config.dataset):
        from fltest.data.sources import load_source

        source = load_source(config.dataset)
    key, root = locate(config, storage, source)
    cached = read_meta(root, key, storage)
    if cached is not None:
        return cached, True
    from fltest.data.shards import write_shard_set  # the datasets library: 0.7 s of a run's start, on a miss only

    return write_shard_set(config, storage, key, root, source), False
