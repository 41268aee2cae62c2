"""A shard's rows in Arrow: taken by index across the source's record batches, ArrayND as fixed-length lists."""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow as pa
import pytest

from fltest.data.shard_rows import SourceRows, fixed_size_features

FEATURES = datasets.Features(
    {"img": datasets.Array3D(shape=(4, 4, 3), dtype="uint8"), "label": datasets.ClassLabel(num_classes=3)}
)


def _source(rows: int = 100, batch: int = 7) -> tuple[datasets.Dataset, np.ndarray]:
    """A source written in record batches of ``batch`` rows (as save_to_disk writes a large set), and its images."""
    images = np.random.default_rng(0).integers(0, 256, size=(rows, 4, 4, 3), dtype=np.uint8)
    parts = [
        datasets.Dataset.from_dict(
            {"img": images[i : i + batch], "label": np.arange(i, min(i + batch, rows)) % 3}, features=FEATURES
        )
        for i in range(0, rows, batch)
    ]
    source = datasets.concatenate_datasets(parts)
    assert len(source.with_format("arrow")[:].to_batches()) > 1
    return source, images


@pytest.mark.parametrize(
    "rows",
    [[0], [99], [0, 6, 7, 8, 50, 99], list(range(100)), []],
    ids=["first", "last", "across-batches", "all", "none"],
)
def test_the_rows_taken_are_the_source_s_rows_in_order(rows):
    source, images = _source()
    table = SourceRows.of(source).shard_table(np.array(rows, dtype=np.int64))
    assert table.schema == fixed_size_features(FEATURES).arrow_schema  # fixed-size lists, the datasets metadata
    shard = datasets.Dataset(table)
    assert shard.features == fixed_size_features(FEATURES)
    values = (
        table.column("img").combine_chunks().flatten().flatten().flatten().to_numpy()
    )  # Arrow's: numpy format gives int64
    assert values.dtype == np.uint8 and np.array_equal(values.reshape(len(rows), 4, 4, 3), images[rows])
    assert shard["label"][:] == [r % 3 for r in rows]


def test_the_layout_is_what_arrow_s_cast_gives():
    source, _ = _source()
    rows = np.arange(0, 100, 3)
    expected = source.select(rows).with_format("arrow")[:].cast(fixed_size_features(FEATURES).arrow_schema)
    assert SourceRows.of(source).shard_table(rows).equals(expected)


def test_an_array_with_a_free_first_dimension_is_cast_as_variable_lists():
    features = datasets.Features(
        {"seq": datasets.Array2D(shape=(None, 2), dtype="float32"), "label": datasets.Value("int64")}
    )
    source = datasets.Dataset.from_dict(
        {"seq": [np.ones((n, 2), dtype=np.float32) * n for n in (1, 2, 3)], "label": [0, 1, 2]}, features=features
    )
    table = SourceRows.of(source).shard_table(np.array([0, 2]))
    assert pa.types.is_list(table.schema.field("seq").type)  # the free dimension stays a variable-length list
    assert [len(row) for row in table.column("seq").to_pylist()] == [1, 3]


def test_the_source_s_batches_are_regrouped_as_views_of_its_own_buffers():
    source, _ = _source()
    stored = source.with_format("arrow")[:].column("img")
    rows = SourceRows.of(source)
    assert rows.schema == fixed_size_features(FEATURES).arrow_schema  # every take gathers fixed-length rows
    for batch, chunk in zip(rows.batches, stored.chunks):
        pixels = batch.column("img").flatten().flatten().flatten()
        assert (
            pixels.buffers()[1].address == chunk.storage.flatten().flatten().flatten().buffers()[1].address
        )  # no copy


def test_a_source_with_a_null_image_keeps_its_layout_and_each_shard_is_cast():
    images = np.arange(3 * 48, dtype=np.uint8).reshape(3, 4, 4, 3)
    source = datasets.Dataset.from_dict({"img": [images[0], None, images[2]], "label": [0, 1, 2]}, features=FEATURES)
    rows = SourceRows.of(source)
    assert rows.schema == source.with_format("arrow")[:].schema  # a cast here would copy the whole column
    table = rows.shard_table(np.array([1, 2]))
    assert table.schema == fixed_size_features(FEATURES).arrow_schema
    assert table.column("img").to_pylist()[0] is None and np.array_equal(
        np.array(table.column("img").to_pylist()[1]), images[2]
    )
