"""The Ray cluster a run is pointed at (``FLTEST_RAY_ADDRESS``), read without importing Ray or Flower."""

from __future__ import annotations

import os

ADDRESS_VARIABLE = "FLTEST_RAY_ADDRESS"


def cluster_address() -> str | None:
    """The Ray cluster to join, from ``FLTEST_RAY_ADDRESS``, or ``None`` for a single machine."""
    return os.environ.get(ADDRESS_VARIABLE) or None
