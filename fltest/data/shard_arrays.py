"""A shard's Arrow table as the arrays a client trains on: float64 features divided by the scale, int64 labels.

Numpy and pyarrow only, so that a process that trains on one shard (a Flower deployment's
ClientApp, started once per message) need not import the datasets library. A column Arrow cannot
hand over as numbers (an ``Image``, say) is decoded by the ``decode`` its caller passes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

LABEL_COLUMN = "y"
Decode = Callable[[str], np.ndarray]  # a column's values, decoded by the datasets library


def table_arrays(table: pa.Table, scale: float, decode: Decode) -> tuple[np.ndarray, np.ndarray]:
    """A shard table as float64 features divided by ``scale``, and int64 labels.

    One feature column keeps each sample's shape (``(n, 8, 8)``, ``(n, 32, 32, 3)``; a scalar
    column is ``(n, 1)``); several are flattened and joined into rows. This is where features
    leave their stored dtype: only a client's own shard, when it trains.
    """
    parts = [
        column_values(table, name, decode).astype(np.float64) for name in table.column_names if name != LABEL_COLUMN
    ]
    features = np.concatenate([p.reshape(len(p), -1) for p in parts], axis=1) if len(parts) > 1 else parts[0]
    return features / scale, column_values(table, LABEL_COLUMN, decode).reshape(-1).astype(np.int64)


def column_values(table: pa.Table, name: str, decode: Decode) -> np.ndarray:
    """Column ``name`` as ``(rows, *shape)`` numbers in its stored dtype (nested lists of one length a level keep their shape)."""
    column, shape = table.column(name).combine_chunks(), []
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    while (
        pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or pa.types.is_fixed_size_list(column.type)
    ):
        if pa.types.is_fixed_size_list(column.type):
            shape.append(column.type.list_size)
        else:
            lengths = column.value_lengths().unique()
            shape.append(lengths[0].as_py() if len(lengths) == 1 else -1)  # -1: ragged, the row stays flat
        column = column.flatten()
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type):
        values = _numbers(column)
        return (
            values.reshape(table.num_rows, *shape) if shape and -1 not in shape else values.reshape(table.num_rows, -1)
        )
    return decode(name)


def _numbers(column: pa.Array) -> np.ndarray:
    """A flat numeric column as numpy: a zero-copy DLPack view where DLPack can carry it (no nulls, not boolean).

    ``Array.to_numpy`` goes through Arrow's pandas conversion, which imports pandas on its first
    call in a process (0.2 s, more on a busy machine): every client process would pay it inside
    its timed local training.
    """
    if column.null_count == 0 and not pa.types.is_boolean(column.type):
        return np.from_dlpack(column)
    return column.to_numpy(zero_copy_only=False)
