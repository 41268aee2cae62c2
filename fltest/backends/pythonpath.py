"""The driver's import path as the ``PYTHONPATH`` of processes that run elsewhere (Ray workers, NVFlare)."""

from __future__ import annotations

import os
import sys


def driver_pythonpath() -> str:
    """This process's ``sys.path`` as absolute folders, joined for ``PYTHONPATH``.

    Another process runs in another working folder: a relative entry (``''`` is the
    working folder itself) would name another place there, so each is made absolute
    against this process's working folder.
    """
    folders = dict.fromkeys(os.path.abspath(entry or os.curdir) for entry in sys.path)
    return os.pathsep.join(folders)
