"""SuperNode key pairs: ECDSA P-384, made by ssh-keygen, one folder per node.

Layout: ``<keys>/<node>/id_ecdsa`` (private, mode 0600, mounted read-only into that node's
container only) and ``<keys>/<node>/id_ecdsa.pub`` (registered with the SuperLink). A key is
never overwritten; two nodes sharing one public key are refused.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from deploy.kit import KIT
from fltest.errors import FLTestError, InputError

PRIVATE_NAME = "id_ecdsa"
PUBLIC_NAME = "id_ecdsa.pub"
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def node_dir(keys_dir: Path, node: str) -> Path:
    """The folder holding ``node``'s key pair (the only thing its container mounts from the keys)."""
    if not NODE_NAME.match(node):
        raise InputError(f"SuperNode name {node!r}: use letters, digits, '.', '_' and '-'")
    return keys_dir / node


def ensure_key(keys_dir: Path, node: str, container_uid: int = KIT.uid) -> tuple[Path, bool]:
    """Create ``node``'s key pair unless it exists; returns (public key path, created).

    The private key is mode 0600 in a 0700 folder; run as root both belong to the container
    user, who reads them through the read-only mount.
    """
    folder = node_dir(keys_dir, node)
    private, public = folder / PRIVATE_NAME, folder / PUBLIC_NAME
    if private.exists() or public.exists():
        if not (private.is_file() and public.is_file()):
            raise InputError(f"{folder}: has only half a key pair; remove it or restore the missing file")
        return public, False
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    command = ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", node, "-f", str(private)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise FLTestError(f"ssh-keygen failed for {private}: {result.stderr.strip()}")
    os.chmod(private, 0o600)
    if os.geteuid() == 0:
        for path in (folder, private, public):
            os.chown(path, container_uid, container_uid)
    return public, True


def public_key(keys_dir: Path, node: str) -> str:
    """``node``'s public key as ``ecdsa-sha2-nistp384 <base64>`` (the comment dropped)."""
    path = node_dir(keys_dir, node) / PUBLIC_NAME
    if not path.is_file():
        raise InputError(f"{path}: no public key (create it: python -m deploy.commands.fltest_flower keys)")
    return " ".join(path.read_text().split()[:2])


def check_unique(keys_dir: Path, nodes: list[str]) -> None:
    """Refuse two nodes that hold the same key pair (a copied key folder)."""
    owners: dict[str, str] = {}
    for node in nodes:
        key = public_key(keys_dir, node)
        if key in owners:
            raise InputError(
                f"{node_dir(keys_dir, node)}: same key as SuperNode {owners[key]}; each SuperNode needs its own"
            )
        owners[key] = node
