"""``fltest-flower files``: the files Flower Apps wrote in their working folders, copied to the host.

Each ServerApp runs in the SuperLink's working folder and each ClientApp in its SuperNode's, a bounded
tmpfs volume of its own per container (``FLOWER_APP_FILES_DIR``, compose/flower.yml). The SuperLink's
is read through the namespace holder, which mounts it too (so a restarted or stopped SuperLink keeps
them); each running SuperNode's through its own container (a tmpfs volume is emptied once no container
mounts it: a stopped SuperNode's files are gone). They are read with the engine's archive API (``docker
cp`` out of a container works with a read-only root; into one it is refused) and extracted as the
invoking user, each into ``<out>/<service>/``, through tarfile's ``data`` filter (no absolute paths, no
links out of the folder, no device files, no owners or set-id bits; what it leaves out is named).
"""

from __future__ import annotations

import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from deploy.flower_emulation.federation import APP_FILES_MOUNT, HOLDER_SERVICE, SUPERLINK_SERVICE, FlowerFederation
from fltest.errors import RunFailed

SPOOL_BYTES = 16 << 20  # an archive up to this size stays in memory while it is read


@dataclass(frozen=True)
class Copied:
    """The App files of one container, copied: its service, the host folder, how many files and bytes, what was left out."""

    service: str
    folder: Path
    files: int
    size: int
    skipped: tuple[str, ...] = ()

    def __str__(self) -> str:
        """``superlink: 1 file, 152 bytes -> app-files/superlink`` (and what the data filter left out)."""
        left_out = (
            f"; left out (links out of the folder, special files): {', '.join(self.skipped)}" if self.skipped else ""
        )
        return f"{self.service}: {self.files} file{'' if self.files == 1 else 's'}, {self.size} bytes -> {self.folder}{left_out}"


def copy_app_files(container, service: str, out: Path) -> Copied:
    """Copy the working folder of ``container`` into ``out/<service>/`` (files already there with the same names are replaced)."""
    folder = out / service
    folder.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []

    def inside(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
        """The member, its path taken below the working folder (the archive's first component), through the ``data`` filter."""
        parts = PurePosixPath(member.name).parts[1:]
        if not parts:
            return None
        try:
            return tarfile.data_filter(member.replace(name=str(PurePosixPath(*parts)), deep=False), destination)
        except tarfile.FilterError:
            skipped.append(str(PurePosixPath(*parts)))
            return None

    chunks, _ = container.get_archive(APP_FILES_MOUNT)
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as archive:
        for chunk in chunks:
            archive.write(chunk)
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(folder, filter=inside)
            files = [member for member in tar.getmembers() if member.isfile()]
    return Copied(service, folder, len(files), sum(member.size for member in files), tuple(skipped))


def fetch_app_files(federation: FlowerFederation, out: Path) -> list[Copied]:
    """Copy the App files of the SuperLink (through its namespace holder) and of every running SuperNode into ``out``.

    A stopped SuperNode has none: its tmpfs volume was emptied when no container mounted it any more.
    """
    client = federation.docker()
    holders = federation.containers(client, HOLDER_SERVICE)
    if not holders:
        raise RunFailed(
            f"project {federation.name}: no running {HOLDER_SERVICE} container, which holds the SuperLink's App files "
            "(fltest-flower up)"
        )
    sources = [(SUPERLINK_SERVICE, holders[0])]
    for service in federation.supernode_services():
        sources += [(service, container) for container in federation.containers(client, service)]
    return [copy_app_files(container, service, out) for service, container in sources]
