"""The documentation's generators (docs/hooks/), importable by the tests as MkDocs loads them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

HOOKS_DIR = Path(__file__).resolve().parent.parent / "docs" / "hooks"


def docs_hook(name: str) -> ModuleType:
    """The module ``docs/hooks/<name>.py``, imported as MkDocs imports it (its folder on ``sys.path``)."""
    if str(HOOKS_DIR) not in sys.path:
        sys.path.insert(0, str(HOOKS_DIR))
    return importlib.import_module(name)
