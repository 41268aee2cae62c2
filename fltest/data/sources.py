"""Load the configured dataset as a Hugging Face ``Dataset``."""

from __future__ import annotations

import datasets
import numpy as np
from datasets.exceptions import DatasetsError

from fltest.config.schema import DatasetConfig
from fltest.errors import FieldError

# What the hub client raises for a dataset it cannot load: not found, no network or offline and not
# cached (ConnectionError), a gated one, an unknown split or revision. Anything else is a bug and
# keeps its traceback, instead of passing for a user's wrong dataset name.
CANNOT_LOAD = (OSError, ValueError, DatasetsError)


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
        except CANNOT_LOAD as exc:
            raise FieldError(f"dataset.name: cannot load {config.name!r} from the hub: {exc}") from None
    else:
        try:
            loaded = datasets.load_from_disk(str(config.path))
        except (FileNotFoundError, ValueError) as exc:
            raise FieldError(f"dataset.path: not a save_to_disk folder: {config.path}: {exc}") from None
        if isinstance(loaded, datasets.DatasetDict):
            if config.split not in loaded:
                raise FieldError(f"dataset.split: {config.split!r} not in {config.path} (has {sorted(loaded)})")
            loaded = loaded[config.split]
        dataset = loaded
    _check_columns(dataset, config)
    return dataset


def _check_columns(dataset: datasets.Dataset, config: DatasetConfig) -> None:
    """The feature and label columns exist; labels are integers (or class labels); features are not text."""
    columns = ", ".join(dataset.column_names)
    for field, names in (("features", config.features), ("label", [config.label])):
        for name in names:
            if name not in dataset.column_names:
                raise FieldError(f"dataset.{field}: column {name!r} not in the dataset (columns: {columns})")
    label_type = dataset.features[config.label]
    if not isinstance(label_type, datasets.ClassLabel) and not (
        isinstance(label_type, datasets.Value) and label_type.dtype.startswith(("int", "uint"))
    ):
        raise FieldError(f"dataset.label: column {config.label!r} holds {label_type}, not integer class labels")
    for name in config.features:
        if _holds_text(dataset.features[name]):
            raise FieldError(f"dataset.features: column {name!r} holds text, not numbers")


def _holds_text(feature: object) -> bool:
    """Whether a column's feature type is (or nests) strings."""
    if isinstance(feature, datasets.Value):
        return feature.dtype in ("string", "large_string")
    inner = getattr(feature, "feature", None)
    return inner is not None and _holds_text(inner)


def label_array(dataset: datasets.Dataset, label: str) -> np.ndarray:
    """The label column alone, as int64 (one batch: the other columns are not read)."""
    return np.asarray(dataset.with_format("numpy", columns=[label])[:][label]).astype(np.int64)


def split_sizes(num_samples: int, config: DatasetConfig) -> tuple[int, int]:
    """``(train, test)`` row counts after ``max_samples`` and ``test_fraction``."""
    if config.max_samples is not None:
        num_samples = min(num_samples, config.max_samples)
    num_test = max(1, round(num_samples * config.test_fraction))
    return num_samples - num_test, num_test
