"""FLTest beyond the machine's own Python: a Debian 13 machine (Python 3.13) runs README command 1 and the
fast tier; constraints.txt resolves with wheels for the other supported Pythons.

The Debian 13 machine is a container of the kit's base image (Debian 13 by debootstrap, no registry,
deploy/kit.env), holding what a user's fresh machine holds: Debian's python3 and python3-venv. It gets
the checkout's files (what ``git clone`` of this commit gives) and reaches PyPI as this host does
(through this host's CA certificates).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from deploy.images import build_base_image, one_build_at_a_time
from deploy.kit import KIT
from tests.conftest import REPO
from tests.doc_blocks import readme_command
from tests.run_tiers import FAST_TIER
from tests.tools.checkout import checkout_files

pytestmark = pytest.mark.pythons

TIER = "pythons tier"
# Other Pythons whose wheels constraints.txt must resolve to (3.11 is the machine's, 3.13 runs below).
RESOLVED_PYTHONS = ["3.12", "3.14"]
EXTRAS = "test,nvflare,torch,deploy,docs"  # every extra a user may install
# The manylinux tags of a current Linux (glibc 2.39, Ubuntu 24.04), newest first, as pip takes them literally.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(39, 4, -1)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
    "any",
]
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # what this host trusts for PyPI (pip's cert, the system's)
HOME = "/home/user"  # the user's folder in the Debian 13 container, where the checkout goes


def checkout_archive(destination: Path) -> Path:
    """The checkout's files (:func:`checkout_files`: what a clone of the commit holds) in a tar archive."""
    archive = destination / "checkout.tar"
    with tarfile.open(archive, "w") as tar:
        for name in checkout_files(REPO):
            tar.add(REPO / name, arcname=f"fltest/{name}", recursive=False)
    return archive


def test_readme_command_1_and_the_fast_tier_on_debian_13(docker_client, progress, tmp_path):
    report = functools.partial(progress, TIER)
    with one_build_at_a_time(report):
        base = build_base_image(docker_client)
    report(f"base image {KIT.base_image}: {base}")
    archive = checkout_archive(tmp_path)
    command_1 = readme_command("Run the example")
    script = "\n".join(
        [
            "set -eu",
            "python3 --version",
            f"cd {HOME} && tar -xf /checkout.tar && cd fltest",
            "start=$(date +%s)",
            command_1,
            'echo "README command 1: $(( $(date +%s) - start )) s"',
            f".venv/bin/python -m pytest -p no:cacheprovider -q -ra --durations=10 -m '{FAST_TIER}'",
        ]
    )
    name = f"fltest-debian-{secrets.token_hex(3)}"
    start = time.monotonic()
    try:
        done = subprocess.run(
            [
                "docker", "run", "--rm", "--name", name, "--shm-size", "1g",
                "--volume", HOME,  # an anonymous volume (--rm removes it): the venv and the tests' files skip FUSE
                "--volume", f"{archive}:/checkout.tar:ro",
                "--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "--env", f"PIP_CERT={CA_BUNDLE}",
                KIT.base_image, "bash", "-c", script,
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )  # fmt: skip
    finally:
        subprocess.run(
            ["docker", "rm", "--force", "--volumes", name], capture_output=True
        )  # Ctrl-C or the timeout: not left running
    output = done.stdout + done.stderr
    report(f"Debian {KIT.debian_release}: exit {done.returncode} ({time.monotonic() - start:.0f} s)")
    assert done.returncode == 0, output[-6000:]
    assert done.stdout.startswith(f"Python {KIT.image_python}."), done.stdout[:200]
    table = {
        line.split()[0]: line.split()
        for line in done.stdout.splitlines()
        if line.split()[:1] in (["flower"], ["nvflare"])
    }
    assert [row[-1] for row in table.values()] == ["identical", "identical"], done.stdout[-4000:]
    install = re.search(r"^README command 1: (\d+) s$", done.stdout, re.M)
    fast = re.search(r"^(\d+) passed.* in ([\d.]+)s", done.stdout.splitlines()[-1])
    assert install and fast, done.stdout[-3000:]
    report(f"README command 1 {install[1]} s; fast tier: {fast[1]} passed in {float(fast[2]):.0f} s")
    slowest = re.findall(r"^([\d.]+)s call\s+(\S+)$", done.stdout, re.M)[:3]
    report("its slowest tests: " + ", ".join(f"{test} {float(seconds):.0f} s" for seconds, test in slowest))


@pytest.mark.parametrize("python", RESOLVED_PYTHONS)
def test_constraints_resolve_with_wheels_for(python, tmp_path):
    # pyhocon (NVFlare's) ships an sdist only, of pure Python: its wheel, built here, serves every Python.
    pin = next(line for line in (REPO / "constraints.txt").read_text().splitlines() if line.startswith("pyhocon=="))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path), pin],
        check=True,
        capture_output=True,
    )
    requirements = subprocess.run(
        [sys.executable, str(REPO / "images" / "requirements.py"), str(REPO / "pyproject.toml"), "venv"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    extras = subprocess.run(
        [sys.executable, str(REPO / "images" / "requirements.py"), str(REPO / "pyproject.toml"), "extras", EXTRAS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    resolved = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--report", str(tmp_path / "report.json"), "--find-links", str(tmp_path),
            "--python-version", python, "--implementation", "cp", "--only-binary=:all:",
            *(f"--platform={platform}" for platform in PLATFORMS),
            "-c", str(REPO / "constraints.txt"), *requirements, *extras,
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    installed = {p["metadata"]["name"].lower() for p in json.loads((tmp_path / "report.json").read_text())["install"]}
    assert {"flwr", "ray", "nvflare", "torch", "numpy", "pyarrow", "ansible-core"} <= installed
