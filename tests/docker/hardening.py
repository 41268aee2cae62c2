"""Checks of a hardened container that both emulations' tests make."""

from __future__ import annotations


def assert_root_read_only(container) -> None:
    """``/`` of the running ``container`` refuses a new file, even from root: root owns ``/``, so only the
    read-only mount can stop it (as the image's user, a write there fails on permissions alone)."""
    write = container.exec_run(["touch", "/probe"], user="root")
    assert write.exit_code != 0 and b"Read-only file system" in write.output, (container.name, write.output)
