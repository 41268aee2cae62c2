"""Search a stream of bytes (an image saved with ``docker save``, a container's log) for secrets."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives import serialization


def find_in_stream(chunks: Iterable[bytes], markers: list[bytes]) -> list[bytes]:
    """The markers that occur in a stream of byte chunks (a marker may straddle two chunks)."""
    found, tail, overlap = set(), b"", max(len(m) for m in markers)
    for chunk in chunks:
        window = tail + chunk
        found.update(m for m in markers if m in window)
        tail = window[-overlap:]
    return sorted(found)


def private_key_markers(key_file: Path) -> list[bytes]:
    """Byte strings that only a SuperNode's private key holds: its scalar (raw, hex) and the tail of its PEM body."""
    text = key_file.read_bytes()
    scalar = serialization.load_ssh_private_key(text, password=None).private_numbers().private_value.to_bytes(48, "big")
    body = [line for line in text.splitlines() if line and not line.startswith(b"-----")]
    return [scalar, scalar.hex().encode(), *body[-3:-1]]
