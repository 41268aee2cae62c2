"""Prepared client shards, written as Arrow files into the Hugging Face datasets cache.

A shard set lives in ``<HF datasets cache>/fltest-shards/<key>/``: ``meta.json``,
``test/`` and ``clients/<i>/``, each folder written by ``save_to_disk``, and
``label_distribution.png``. The key hashes everything that changes the shards, the
format version and the storage variant: ``mmap`` shards are memory-mapped when loaded
(one machine), ``memory`` shards are read fully into memory so that they pickle with
their data (a Ray cluster).

Shards are the source's own rows, selected by index (Arrow, no conversion): features keep
their dtype and shape (uint8 images stay uint8; an ``ArrayND`` is stored as fixed-length
lists, :mod:`fltest.data.shard_rows`) in columns ``x0``, ``x1``, ... and the label is ``y``.
They become float64 (divided by the dataset's ``scale``; one feature column keeps each sample's
shape, several are flattened and joined into rows) only when a client trains (:func:`dataset_arrays`).
:mod:`fltest.data.shard_cache` keys and finds a set without this module's datasets import, and calls it to write one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import datasets
import numpy as np
from datasets.table import InMemoryTable
from tqdm import tqdm

from fltest.config.schema import ExperimentConfig
from fltest.data.plots import save_label_distribution
from fltest.data.shard_arrays import LABEL_COLUMN, table_arrays
from fltest.data.shard_cache import FORMAT_VERSION, read_meta
from fltest.data.shard_rows import SourceRows
from fltest.data.shard_set import LABEL_PLOT, ShardSet, Storage, client_folder
from fltest.data.sources import label_array, load_source
from fltest.data.split import Split, split_rows
from fltest.errors import RunFailed


def feature_columns(count: int) -> list[str]:
    """The shards' feature column names: ``x0``, ``x1``, ... in the config's order."""
    return [f"x{i}" for i in range(count)]


def client_dataset(shards: ShardSet, partition_id: int) -> datasets.Dataset:
    """Client ``partition_id``'s shard as a ``Dataset``: memory-mapped, or fully in memory for ``memory`` shards."""
    return datasets.load_from_disk(str(shards.client_folder(partition_id)), keep_in_memory=shards.storage == "memory")


def dataset_arrays(dataset: datasets.Dataset, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """A shard ``Dataset`` as float64 features divided by ``scale``, and int64 labels (:func:`fltest.data.shard_arrays.table_arrays`)."""

    def decode(name: str) -> np.ndarray:
        return np.asarray(dataset.with_format("numpy", columns=[name])[:][name])

    return table_arrays(dataset.with_format("arrow")[:], scale, decode)  # the rows as one Arrow table, stored types


def _shard_columns(source: datasets.Dataset, config: ExperimentConfig) -> datasets.Dataset:
    """The source's feature and label columns under the shards' names, still the source's Arrow data."""
    features, label = config.dataset.features, config.dataset.label
    names = {**dict(zip(features, feature_columns(len(features)))), label: LABEL_COLUMN}
    return source.select_columns([*features, label]).rename_columns(
        {old: new for old, new in names.items() if old != new}
    )


def _feature_shape(folder: Path, scale: float) -> tuple[int, ...]:
    """One sample's feature shape as training sees it (:func:`dataset_arrays`), from the first row written in ``folder``."""
    features, _ = dataset_arrays(datasets.load_from_disk(str(folder)).select([0]), scale)
    return tuple(int(n) for n in features.shape[1:])


def _write_shards(staging: Path, key: str, columns: datasets.Dataset, split: Split, num_clients: int) -> list[int]:
    """Write the test split and every client's rows with ``save_to_disk``, a progress bar over the clients; their sizes."""
    source_rows = SourceRows.of(columns)

    def write(rows: np.ndarray, folder: Path) -> None:
        part = source_rows.shard_table(rows)  # this part only, in memory
        fingerprint = hashlib.sha256(f"{key}/{folder.name}".encode()).hexdigest()[
            :32
        ]  # from the key, not a hash of the data
        datasets.Dataset(InMemoryTable(part), fingerprint=fingerprint).save_to_disk(str(folder))

    write(split.test_rows, staging / "test")
    sizes = []
    for client in tqdm(range(num_clients), desc="writing shards", unit="client", disable=None, leave=False):
        rows = split.client_rows(client)
        write(rows, client_folder(staging, client))
        sizes.append(len(rows))
    return sizes


def write_shard_set(
    config: ExperimentConfig, storage: Storage, key: str, root: Path, source: datasets.Dataset | None
) -> ShardSet:
    """Build the experiment's shard set into ``root`` (its cache folder under ``key``); the set.

    ``source``: the dataset if already read (read here when not). It is read once: its label column for
    the split, then each client's rows by index. The set is written to a temporary folder and renamed
    into place, so a crash never leaves a half-written set under the final key; a folder of another
    format is replaced. :func:`fltest.data.shard_cache.prepare_shards` calls it when the cache misses.
    """
    source = source if source is not None else load_source(config.dataset)
    labels = label_array(source, config.dataset.label)
    datasets.disable_progress_bars()  # datasets' own bars (a label cast, each save): the shards' bar is enough
    staging = root.with_name(f"{key}.tmp-{os.getpid()}")
    try:
        split = split_rows(source, config, labels)
        columns = _shard_columns(source, config)
        shutil.rmtree(staging, ignore_errors=True)
        sizes = _write_shards(staging, key, columns, split, config.clients)
        save_label_distribution(split.partitioner, config, staging / LABEL_PLOT)
        meta = {
            "format": FORMAT_VERSION,
            "num_clients": config.clients,
            "feature_shape": list(_feature_shape(staging / "test", config.dataset.scale)),
            "scale": config.dataset.scale,
            "num_classes": int(labels[np.concatenate([split.train_rows, split.test_rows])].max()) + 1,
            "client_sizes": sizes,
            "test_size": int(len(split.test_rows)),
            "config": {
                "dataset": config.dataset.model_dump(mode="json"),
                "partition": config.partition.model_dump(mode="json"),
                "seed": config.seed,
            },
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        shutil.rmtree(root, ignore_errors=True)  # a set of another format under this key
        try:
            staging.rename(root)
        except OSError:
            if read_meta(root, key, storage) is None:  # not a concurrent writer finishing first
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno != errno.ENOSPC:
            raise
        raise RunFailed(
            f"the shards of {config.clients} clients do not fit in {root.parent}: no space left on that device "
            f"(set HF_DATASETS_CACHE to a folder on a larger one)"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        datasets.enable_progress_bars()
    return read_meta(root, key, storage)
