"""The Ray token: generated on the host, readable by the container user only, never overwritten."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

CONTAINER_UID = 10001  # the image's non-root user (images/fltest/Dockerfile)


def ensure_ray_token(path: Path, container_uid: int = CONTAINER_UID) -> bool:
    """Create the Ray token at ``path`` if it is missing; returns whether one was created.

    The token is 256 random bits in hex, as ``ray get-auth-token --generate`` makes. The folder
    is mode 0700. The file is mode 0400 and, when run as root, owned by the container user, so
    that the non-root container reads it through its read-only mount and no other host user
    can. Not run as root, the file is 0444 inside the 0700 folder: still unreachable for other
    host users, readable through the mount.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if path.exists():
        return False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    if os.geteuid() == 0:
        os.chown(path, container_uid, container_uid)
        os.chmod(path, 0o400)
    else:
        os.chmod(path, 0o444)
    return True
