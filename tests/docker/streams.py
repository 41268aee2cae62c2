"""Search a stream of bytes (an image saved with ``docker save``, a container's log) for secrets."""

from __future__ import annotations

from collections.abc import Iterable


def find_in_stream(chunks: Iterable[bytes], markers: list[bytes]) -> list[bytes]:
    """The markers that occur in a stream of byte chunks (a marker may straddle two chunks)."""
    found, tail, overlap = set(), b"", max(len(m) for m in markers)
    for chunk in chunks:
        window = tail + chunk
        found.update(m for m in markers if m in window)
        tail = window[-overlap:]
    return sorted(found)
