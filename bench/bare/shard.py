"""Reading one client's shard, as each bare app does: pyarrow and numpy only (no FLTest import).

The shards are the folders FLTest's driver prepared (``save_to_disk``): ``<root>/clients/<id:05d>/`` and
``<root>/test/``, with ``<root>/meta.json`` giving the features' scale. The bare apps import this file
beside them, as a user's app would carry its own data loader.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa


def load(folder: Path, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a ``save_to_disk`` folder as float64 feature rows divided by ``scale``, and int64 labels."""
    state = json.loads((folder / "state.json").read_text())
    table = pa.concat_tables(
        pa.ipc.open_stream(pa.memory_map(str(folder / f["filename"]))).read_all() for f in state["_data_files"]
    )
    columns = [name for name in table.column_names if name != "y"]
    parts = [_numbers(table.column(name).combine_chunks()).reshape(table.num_rows, -1) for name in columns]
    return np.concatenate(parts, axis=1).astype(np.float64) / scale, _numbers(table.column("y").combine_chunks())


def _numbers(column: pa.Array) -> np.ndarray:
    """A (nested) numeric column's values, flat."""
    while pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    return column.to_numpy(zero_copy_only=False).astype(np.int64 if pa.types.is_integer(column.type) else np.float64)


def client(root: Path, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Client ``partition_id``'s shard."""
    return load(root / "clients" / f"{partition_id:05d}", scale(root))


def test(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """The held-out test split."""
    return load(root / "test", scale(root))


def scale(root: Path) -> float:
    """The features' scale written in the shard set's ``meta.json``."""
    return float(json.loads((root / "meta.json").read_text())["scale"])


def num_classes(root: Path) -> int:
    """The number of classes written in the shard set's ``meta.json``."""
    return int(json.loads((root / "meta.json").read_text())["num_classes"])
