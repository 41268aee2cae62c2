"""The kit's shared values (image, container user, folders, ports), read from ``deploy/kit.env``.

That file is the one source: compose gets its values through the compose wrapper's
environment, the image build as build arguments, Ansible through ``roles/fltest_kit``.
Standard library only: the node start-up inside the image reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KIT_FILE = Path(__file__).resolve().with_name("kit.env")


def env_file_values(path: Path = KIT_FILE) -> dict[str, str]:
    """The ``KEY=value`` pairs of an env file (the kit file by default; comment and blank lines skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not name.lstrip().startswith("#"):
            values[name.strip()] = value.strip()
    return values


@dataclass(frozen=True)
class Kit:
    """The kit's shared values, typed."""

    image: str
    debian_release: str
    image_python: str
    uid: int
    home: str
    work_dir: str
    ray_gcs_port: int
    ray_node_start_file: str
    superlink_port: int
    fleet_port: int
    app_files_dir: str

    @property
    def base_image(self) -> str:
        """The base image every kit image is built on: ``fltest-base:<Debian release>``."""
        return f"fltest-base:{self.debian_release}"

    @classmethod
    def read(cls, path: Path = KIT_FILE) -> Kit:
        """The values of the kit file at ``path``."""
        values = env_file_values(path)
        return cls(
            image=values["FLTEST_IMAGE"],
            debian_release=values["FLTEST_DEBIAN_RELEASE"],
            image_python=values["FLTEST_IMAGE_PYTHON"],
            uid=int(values["FLTEST_UID"]),
            home=values["FLTEST_HOME"],
            work_dir=values["FLTEST_WORK_DIR"],
            ray_gcs_port=int(values["RAY_GCS_PORT"]),
            ray_node_start_file=values["RAY_NODE_START_FILE"],
            superlink_port=int(values["SUPERLINK_PORT"]),
            fleet_port=int(values["FLEET_PORT"]),
            app_files_dir=values["FLOWER_APP_FILES_DIR"],
        )


KIT = Kit.read()
