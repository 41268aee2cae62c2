"""The checkout's own files, as a clone of its commit would hold them once the work tree is committed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def checkout_files(repo: Path = REPO) -> list[str]:
    """The files git lists in ``repo`` (tracked, and new ones it does not ignore) that exist in the work tree:
    no local venv, caches, wheelhouse or results."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return [name for name in (item.decode() for item in listed) if name and (repo / name).is_file()]


def copy_checkout(destination: Path, repo: Path = REPO) -> Path:
    """The checkout's files (:func:`checkout_files`), copied to ``destination``."""
    for name in checkout_files(repo):
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, destination / name)
    return destination
