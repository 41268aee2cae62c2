"""A shard's rows in Arrow: the source's rows taken by index, image-like columns as fixed-length lists.

Rows are taken record batch by record batch with Arrow's ``take`` (``datasets`` gathers row by
row, one slice a row: 3 of the 16 s a 60,000-image preparation took). The datasets library stores an
``Array2D``..``Array5D`` as variable-length lists, with an offset for every inner list (for
32x32x3 uint8 images, 4.2 KB of offsets beside 3 KB of pixels); a shard stores fixed-length
lists, the values alone. The source's batches are regrouped into that layout once, as views of
their own buffers, so that every take gathers fixed-length rows (taking from the nested
variable-length lists, then regrouping each shard, took 2.0 s for 120 clients of 60,000
images; taking from the regrouped views, 0.6 s).
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa

_ARRAY_TYPES = (datasets.Array2D, datasets.Array3D, datasets.Array4D, datasets.Array5D)


def fixed_size_features(features: datasets.Features) -> datasets.Features:
    """``features`` with every ``ArrayND`` as nested fixed-length lists of the same dtype and shape."""
    fixed = {}
    for name, feature in features.items():
        if isinstance(feature, _ARRAY_TYPES):
            nested = datasets.Value(feature.dtype)
            for length in reversed(feature.shape):
                nested = datasets.Sequence(
                    nested, length=-1 if length is None else length
                )  # a free first dimension: variable
            feature = nested
        fixed[name] = feature
    return datasets.Features(fixed)


def _fixed_size_chunk(chunk: pa.Array, shape: tuple[int, ...]) -> pa.Array:
    """One chunk of an ``ArrayND`` column as nested fixed-size lists: its values, regrouped (no element-wise cast)."""
    values = chunk.storage if isinstance(chunk, pa.ExtensionArray) else chunk
    for _ in shape:
        values = values.flatten()  # honours the chunk's offsets and slice
    for length in reversed(shape):
        values = pa.FixedSizeListArray.from_arrays(values, length)
    return values


def _regroups(feature: datasets.features.FeatureType, column: pa.ChunkedArray) -> bool:
    """Whether ``column`` (an ``ArrayND`` of fixed shape, no null row) becomes fixed-length lists by regrouping its values, no copy."""
    return isinstance(feature, _ARRAY_TYPES) and None not in feature.shape and column.null_count == 0


def fixed_size_table(table: pa.Table, features: datasets.Features) -> pa.Table:
    """``table`` (columns typed by ``features``) in the layout of :func:`fixed_size_features`, its schema and metadata.

    A column already in that layout is kept; an ``ArrayND`` column of fixed shape and no null row
    is regrouped from its values (views of its buffers, about seven times faster than Arrow's cast,
    which took 20 of 35 s to prepare 60,000 CIFAR-sized images); every other column, and one with a
    null row or a free first dimension, is cast.
    """
    schema = fixed_size_features(features).arrow_schema
    columns = []
    for field, column in zip(schema, table.columns):
        feature = features[field.name]
        if column.type == field.type:
            columns.append(column)
        elif _regroups(feature, column):
            columns.append(
                pa.chunked_array([_fixed_size_chunk(chunk, feature.shape) for chunk in column.chunks], type=field.type)
            )
        else:
            columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass(frozen=True)
class SourceRows:
    """A source's Arrow record batches (zero-copy views of a memory-mapped file), to take shards' rows from."""

    batches: list[pa.RecordBatch]
    starts: np.ndarray  # the first row of each batch, and the row count last
    schema: pa.Schema
    features: datasets.Features

    @classmethod
    def of(cls, source: datasets.Dataset) -> SourceRows:
        """``source``'s batches, read on demand (a memory-mapped source stays on disk), in the shards' layout when regrouping gives it.

        A source with an ``ArrayND`` column that must be cast (a null row, a free first dimension)
        keeps its stored layout, and each shard is cast after its take: a cast here would copy
        the whole column into memory.
        """
        table = source.with_format("arrow")[:]
        if all(
            _regroups(feature, table.column(name))
            for name, feature in source.features.items()
            if isinstance(feature, _ARRAY_TYPES)
        ):
            table = fixed_size_table(table, source.features)  # views of the source's own buffers
        batches = table.to_batches()
        starts = np.cumsum([0, *(batch.num_rows for batch in batches)])
        return cls(batches=batches, starts=starts, schema=table.schema, features=source.features)

    def take(self, rows: np.ndarray) -> pa.Table:
        """The rows ``rows`` (sorted), each batch's with Arrow's ``take`` (a take over several batches would first join them)."""
        taken = []
        bounds = np.searchsorted(rows, self.starts)
        for batch, start, low, high in zip(self.batches, self.starts, bounds[:-1], bounds[1:]):
            if low < high:
                taken.append(batch.take(pa.array(rows[low:high] - start)))
        return pa.Table.from_batches(taken, schema=self.schema)

    def shard_table(self, rows: np.ndarray) -> pa.Table:
        """The rows ``rows`` (sorted) in the shards' layout (:func:`fixed_size_table`: nothing left to do for a regrouped source)."""
        return fixed_size_table(self.take(rows), self.features)
