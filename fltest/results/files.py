"""Small file helpers for results: atomic JSON writes, JSON and JSONL reads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or an empty one when the file is missing (a killed run)."""
    return json.loads(path.read_text()) if path.is_file() else {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All records of a JSON-lines file; a torn last line (a killed run) is skipped."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
