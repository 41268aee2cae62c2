"""first-lab.md's inventory edits, as a user makes them in ``$EDITOR``: run as ``$EDITOR hosts.yml group_vars/all.yml``
(the page's line) on the copies of the sample, it sets the two emulated nodes, the login key and known hosts, and the
image under test. Its settings come as JSON in :data:`SETTINGS_VARIABLE` (the shell splits ``$EDITOR`` on spaces)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

SETTINGS_VARIABLE = "FLTEST_TEST_LAB"  # {"nodes": {name: ip}, "key": ..., "known_hosts": ..., "image": ...}
SAMPLE_KEY_LINE = "# ansible_ssh_private_key_file: ~/.ssh/fltest_lab\n"  # first-lab.md: the user sets this line


def edit_hosts(path: Path, nodes: dict[str, str]) -> None:
    """The head and the worker, one Ray CPU each; no Flower groups."""
    hosts = yaml.safe_load(path.read_text())
    head, worker = nodes
    hosts["all"]["children"] = {
        "ray_head": {"hosts": {head: {"ansible_host": nodes[head], "cluster_ip": nodes[head], "ray_num_cpus": 1}}},
        "ray_workers": {
            "hosts": {worker: {"ansible_host": nodes[worker], "cluster_ip": nodes[worker], "ray_num_cpus": 1}}
        },
        "superlink": {"hosts": {}},
        "supernodes": {"hosts": {}},
    }
    path.write_text(yaml.safe_dump(hosts))


def edit_settings(path: Path, key: str, known_hosts: str, image: str) -> None:
    """The sample's key line set, then the lab's known hosts and the image under test."""
    text = path.read_text()
    if SAMPLE_KEY_LINE not in text:
        sys.exit(f"{path}: no line {SAMPLE_KEY_LINE!r} to edit")
    path.write_text(
        text.replace(SAMPLE_KEY_LINE, f"ansible_ssh_private_key_file: {key}\n")
        + f"ansible_ssh_common_args: -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known_hosts}\n"
        + f"fltest_image: {image}\n"
    )


def main(paths: list[str]) -> None:
    """Edit each file the page names: ``hosts.yml``, and ``group_vars/all.yml``."""
    settings = json.loads(os.environ[SETTINGS_VARIABLE])
    for path in map(Path, paths):
        if path.name == "hosts.yml":
            edit_hosts(path, settings["nodes"])
        else:
            edit_settings(path, settings["key"], settings["known_hosts"], settings["image"])


if __name__ == "__main__":
    main(sys.argv[1:])
