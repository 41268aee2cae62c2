"""Checks of a hardened container that both emulations' tests make."""

from __future__ import annotations


def assert_root_read_only(container) -> None:
    """``/`` of the running ``container`` refuses a new file, even from root: root owns ``/``, so only the
    read-only mount can stop it (as the image's user, a write there fails on permissions alone)."""
    write = container.exec_run(["touch", "/probe"], user="root")
    assert write.exit_code != 0 and b"Read-only file system" in write.output, (container.name, write.output)


def assert_no_capability_inside(container) -> None:
    """A process started in the running ``container`` has no effective capability and cannot gain privileges
    (``CapEff: 0``, ``NoNewPrivs: 1``: security.md)."""
    status = container.exec_run(["grep", "-E", "^(CapEff|NoNewPrivs)", "/proc/self/status"]).output.decode().split()
    assert status == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1"], (container.name, status)


def assert_hardened(container) -> None:
    """No capability, no privilege gain (checked inside too), a read-only root file system, memory and process
    limits."""
    host = container.attrs["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"], container.name
    assert "no-new-privileges:true" in host["SecurityOpt"], container.name
    assert host["ReadonlyRootfs"] is True, container.name
    assert host["Memory"] > 0 and host["PidsLimit"] > 0, container.name
    assert_root_read_only(container)
    assert_no_capability_inside(container)
