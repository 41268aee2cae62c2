"""The Ray token: generated on the host, readable by the container user only, never overwritten.

Standard library only: the node start-up (``deploy.node.ray_start``, inside the image) checks the
token with :func:`token_problem` too.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from deploy.kit import KIT
from fltest.errors import InputError

TOKEN_HINT = "run: fltest-deploy token"


def _readable_by(info: os.stat_result, uid: int) -> bool:
    """Whether the mode bits let user ``uid`` (group ``uid``, no capabilities) read the file."""
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IRUSR)
    if info.st_gid == uid:
        return bool(info.st_mode & stat.S_IRGRP)
    return bool(info.st_mode & stat.S_IROTH)


def token_problem(path: Path, uid: int | None = None) -> str | None:
    """Why ``path`` is not a usable Ray token (a phrase), or ``None`` when it is one.

    A token is a non-empty regular file that user ``uid`` can read: the container user when
    the host checks (``uid`` given: the mode bits decide, as in the container), the calling
    user otherwise (``os.access``).
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory, not the token file"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if uid is not None and not _readable_by(info, uid):
        return f"is not readable by uid {uid} (mode {stat.S_IMODE(info.st_mode):04o}, owner {info.st_uid})"
    if uid is None and not os.access(path, os.R_OK):
        return f"is not readable by uid {os.geteuid()}"
    try:
        if not Path(path).read_text().strip():
            return "is empty"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None


def _is_empty_directory(path: Path) -> bool:
    """The empty directory Docker creates when it bind-mounts a missing host file."""
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def ensure_ray_token(path: Path, container_uid: int = KIT.uid) -> str:
    """Create the Ray token at ``path`` if it is missing; returns ``created``, ``kept`` or ``replaced``.

    ``replaced``: ``path`` was an empty directory (what Docker makes of a missing bind-mount
    source), now a new token. Any other unusable ``path`` (a directory with files, an empty
    or unreadable file) raises :class:`InputError` naming it, and is left as it is.

    The token is 256 random bits in hex, as ``ray get-auth-token --generate`` makes. The folder
    is mode 0700. The file is mode 0400 and, when run as root, owned by the container user, so
    that the non-root container reads it through its read-only mount and no other host user
    can. Not run as root, the file is 0444 inside the 0700 folder: still unreachable for other
    host users, readable through the mount.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    outcome = "created"
    if _is_empty_directory(path):
        path.rmdir()
        outcome = "replaced"
    elif os.path.lexists(path):
        problem = token_problem(path, container_uid)
        if problem:
            raise InputError(f"Ray token {path}: {problem} (remove it, then {TOKEN_HINT})")
        return "kept"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    if os.geteuid() == 0:
        os.chown(path, container_uid, container_uid)
        os.chmod(path, 0o400)
    else:
        os.chmod(path, 0o444)
    return outcome
