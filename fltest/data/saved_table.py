"""A folder written by the datasets library's ``save_to_disk``, read with pyarrow alone.

``save_to_disk`` writes the rows (indices already applied) as Arrow stream files, listed in order
in the folder's ``state.json``; reading them memory-mapped is what ``load_from_disk`` does, without
importing the datasets library (about a second per process). The processes that train on one shard
(a Flower deployment's ClientApp, started once per message; NVFlare's client processes) read theirs
here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from fltest.data.shard_arrays import table_arrays

STATE_FILE = "state.json"


def read_saved_table(folder: Path) -> pa.Table:
    """The rows of the ``save_to_disk`` folder ``folder``, memory-mapped, in the order they were saved."""
    state = json.loads((folder / STATE_FILE).read_text())
    if state.get("_indices_data_files"):
        raise ValueError(f"{folder}: saved with an indices mapping, which save_to_disk does not write")
    tables = [pa.ipc.open_stream(pa.memory_map(str(folder / f["filename"]))).read_all() for f in state["_data_files"]]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def saved_arrays(folder: Path, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The saved shard in ``folder`` as float64 features divided by ``scale`` and int64 labels (:func:`table_arrays`)."""
    return table_arrays(read_saved_table(folder), scale, lambda name: _decoded(folder, name))


def _decoded(folder: Path, name: str) -> np.ndarray:
    """Column ``name`` of the saved shard, decoded by the datasets library (an ``Image`` column, say)."""
    import datasets  # only for a column Arrow cannot hand over as numbers: a second of every client's start

    return np.asarray(datasets.load_from_disk(str(folder)).with_format("numpy", columns=[name])[:][name])
