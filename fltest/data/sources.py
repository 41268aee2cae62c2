"""Load the configured dataset as a Hugging Face ``Dataset``."""

from __future__ import annotations

import datasets
import numpy as np

from fltest.config.schema import DatasetConfig
from fltest.errors import InputError


def _digits() -> datasets.Dataset:
    """scikit-learn's bundled digits (1,797 images of 8x8), columns ``image`` and ``label``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return datasets.Dataset.from_dict(
        {"image": digits.images.astype(np.float32), "label": digits.target.astype(np.int64)}
    )


def load_source(config: DatasetConfig) -> datasets.Dataset:
    """Load the dataset the config names, before any split.

    ``hub`` uses :func:`datasets.load_dataset` (it needs the hub, or the local
    Hugging Face cache with ``HF_HUB_OFFLINE=1``); ``disk`` uses
    :func:`datasets.load_from_disk` on a ``save_to_disk`` folder.
    """
    if config.source == "digits":
        dataset = _digits()
    elif config.source == "hub":
        try:
            dataset = datasets.load_dataset(config.name, split=config.split, revision=config.revision)
        except Exception as exc:  # the hub client raises many types; all mean "cannot load"
            raise InputError(f"dataset.name: cannot load {config.name!r} from the hub: {exc}") from None
    else:
        try:
            loaded = datasets.load_from_disk(str(config.path))
        except (FileNotFoundError, ValueError) as exc:
            raise InputError(f"dataset.path: not a save_to_disk folder: {config.path}: {exc}") from None
        if isinstance(loaded, datasets.DatasetDict):
            if config.split not in loaded:
                raise InputError(
                    f"dataset.split: {config.split!r} not in {config.path} (has {sorted(loaded)})"
                )
            loaded = loaded[config.split]
        dataset = loaded
    missing = [c for c in [*config.features, config.label] if c not in dataset.column_names]
    if missing:
        raise InputError(
            f"dataset.features/label: column {missing[0]!r} not in the dataset "
            f"(columns: {', '.join(dataset.column_names)})"
        )
    return dataset


def source_fingerprint(config: DatasetConfig) -> str | None:
    """A fingerprint of a ``disk`` dataset's content, so that a changed folder changes the cache key."""
    if config.source != "disk":
        return None
    loaded = datasets.load_from_disk(str(config.path))
    if isinstance(loaded, datasets.DatasetDict):
        return ",".join(f"{name}={split._fingerprint}" for name, split in sorted(loaded.items()))
    return loaded._fingerprint


def to_arrays(dataset: datasets.Dataset, features: list[str], label: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Features as a float32 matrix (columns flattened and joined, divided by ``scale``) and int64 labels."""
    numpy_view = dataset.with_format("numpy", columns=[*features, label])
    parts = [np.asarray(numpy_view[c], dtype=np.float32).reshape(len(dataset), -1) for c in features]
    matrix = np.concatenate(parts, axis=1) / np.float32(scale)
    labels = np.asarray(numpy_view[label]).astype(np.int64)
    return matrix, labels


def num_samples_known_locally(config: DatasetConfig) -> int | None:
    """The dataset's row count when it can be had without a download (digits, disk), else ``None``."""
    if config.source == "digits":
        return 1797
    if config.source == "disk":
        return len(load_source(config))
    return None


def split_sizes(num_samples: int, config: DatasetConfig) -> tuple[int, int]:
    """``(train, test)`` row counts after ``max_samples`` and ``test_fraction``."""
    if config.max_samples is not None:
        num_samples = min(num_samples, config.max_samples)
    num_test = max(1, round(num_samples * config.test_fraction))
    return num_samples - num_test, num_test
