"""A folder written by the datasets library's ``save_to_disk``, read as one Arrow table with pyarrow alone.

``save_to_disk`` writes the rows (indices already applied) as Arrow stream files, listed in order
in the folder's ``state.json``; reading them memory-mapped is what ``load_from_disk`` does, without
importing the datasets library (about a second per process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

STATE_FILE = "state.json"


def read_saved_table(folder: Path) -> pa.Table:
    """The rows of the ``save_to_disk`` folder ``folder``, memory-mapped, in the order they were saved."""
    state = json.loads((folder / STATE_FILE).read_text())
    if state.get("_indices_data_files"):
        raise ValueError(f"{folder}: saved with an indices mapping, which save_to_disk does not write")
    tables = [pa.ipc.open_stream(pa.memory_map(str(folder / f["filename"]))).read_all() for f in state["_data_files"]]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
