"""A prepared shard set as its processes see it: paths and figures, and each client's arrays read with pyarrow.

:mod:`fltest.data.shards` prepares and caches the set with the datasets library; this module is what a
process that trains on a shard needs (NVFlare's client processes, the reference, Ray's workers on one
machine), without importing that library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from fltest.data.saved_table import saved_arrays

Storage = Literal["mmap", "memory"]
LABEL_PLOT = "label_distribution.png"


def client_folder(root: Path, partition_id: int) -> Path:
    """The ``save_to_disk`` folder of client ``partition_id``'s shard in the shard set at ``root``."""
    return root / "clients" / f"{partition_id:05d}"


@dataclass(frozen=True)
class ShardSet:
    """A prepared, cached shard set; small enough to pickle (it holds paths, not data).

    ``storage`` is the variant the set was prepared as: ``mmap`` shards are memory-mapped when
    loaded (one machine), ``memory`` shards are read fully into memory (:func:`fltest.data.shards.client_dataset`).
    """

    root: Path
    key: str
    storage: Storage
    num_clients: int
    feature_shape: tuple[int, ...]  # one sample's, as training sees it (:func:`fltest.data.shard_arrays.table_arrays`)
    scale: float
    num_classes: int
    client_sizes: tuple[int, ...]
    test_size: int

    def client_folder(self, partition_id: int) -> Path:
        """The ``save_to_disk`` folder of client ``partition_id``'s shard."""
        return client_folder(self.root, partition_id)

    @property
    def test_folder(self) -> Path:
        """The ``save_to_disk`` folder of the held-out test split."""
        return self.root / "test"

    def test_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The test split as float64 features and int64 labels."""
        return saved_arrays(self.test_folder, self.scale)

    def client_arrays(self, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``partition_id``'s shard as float64 features and int64 labels."""
        return saved_arrays(self.client_folder(partition_id), self.scale)

    @property
    def label_plot(self) -> Path:
        """The per-client label distribution, drawn as Flower Datasets draws it (PNG)."""
        return self.root / LABEL_PLOT
