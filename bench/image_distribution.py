"""Benchmark: how the FLTest image reaches lab nodes, today's copies against the relay (fltest_images_distribution).

On N emulated lab nodes (``images/node/``: Debian with sshd, Docker installed by ``cluster.yml``, as in the
Ansible tier), each with two interfaces: an uplink network, the only one the controller (this host, running
``ansible-playbook``) reaches them on, and a cluster network (their ``cluster_ip``). For each distribution in
turn the image is removed from every node (and the relay's archives), then ``cluster.yml --tags images`` runs;
measured are its wall time and the bytes the nodes received on each network: on the uplink, what the
controller sent (SSH: the archives and Ansible's own traffic); on the cluster network, what the relay sent.
``controller``: the controller copies the archive to every node (N archives through its uplink); ``relay``: it
sends one to the head, which serves it to the others over the cluster network.
Needs the FLTest image (``fltest-deploy build``) and apt reachable from the nodes; takes 15-30 minutes.
Run: ``python bench/image_distribution.py [--nodes 3] [--json results/bench-images.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from deploy.images import IMAGE

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the Ansible tier's emulated lab nodes (tests/ansible), which this benchmark starts too
from tests.ansible.test_ansible import NODE_FLAGS, NODE_IMAGE, build_node_image, sshd_answers  # noqa: E402

ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
TAG = "fltest:bench-images"  # a tag of the image's id, so that a rebuild elsewhere cannot change it mid-bench
# Outside Docker's default address pools (172.17-172.31.0.0/16, 192.168.0.0/16), which Docker hands out in turn.
NETWORKS = {"uplink": ("fltest-bench-uplink", "172.16.241"), "cluster": ("fltest-bench-cluster", "172.16.242")}
DISTRIBUTIONS = ("controller", "relay")
RELAY_DIR = yaml.safe_load((ANSIBLE / "roles" / "fltest_kit" / "defaults" / "main.yml").read_text())[
    "fltest_kit_image_relay_dir"
]
COUNTERS = """
import json, pathlib
print(json.dumps({p.name: [(p / "address").read_text().strip(), int((p / "statistics" / "rx_bytes").read_text())]
                  for p in pathlib.Path("/sys/class/net").iterdir() if p.name != "lo"}))
"""


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The docker CLI on this host."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def node_name(index: int) -> str:
    """The container (and host) name of emulated node ``index``."""
    return f"fltest-bench-node{index}"


def start_nodes(count: int, key: Path) -> None:
    """``count`` nodes, each on the uplink network and then the cluster network, with fixed addresses."""
    for name, prefix in NETWORKS.values():
        docker("network", "rm", name, check=False)
        docker("network", "create", "--subnet", f"{prefix}.0/24", name)
    for index in range(count):
        docker(
            "run",
            "--detach",
            "--name",
            node_name(index),
            "--hostname",
            node_name(index),
            "--network",
            NETWORKS["uplink"][0],
            "--ip",
            f"{NETWORKS['uplink'][1]}.{10 + index}",
            *NODE_FLAGS,
            "--volume",
            f"{key}.pub:/root/.ssh/authorized_keys.mounted:ro",
            NODE_IMAGE,
        )
        docker(
            "network",
            "connect",
            "--ip",
            f"{NETWORKS['cluster'][1]}.{10 + index}",
            NETWORKS["cluster"][0],
            node_name(index),
        )
    deadline = time.monotonic() + 90
    while not all(sshd_answers(f"{NETWORKS['uplink'][1]}.{10 + i}") for i in range(count)):
        if time.monotonic() > deadline:
            raise SystemExit("the emulated nodes do not answer on SSH after 90 s")
        time.sleep(1)


def remove_nodes(count: int) -> None:
    """The nodes (with their volumes), the networks, and the cgroups the nodes' dockerd made (empty once they are gone)."""
    for index in range(count):
        docker("rm", "--force", "--volumes", node_name(index), check=False)
    for name, _ in NETWORKS.values():
        docker("network", "rm", name, check=False)
    for index in range(count):  # images/node/entrypoint.sh: cgroup-parent /fltest-node-<hostname>
        for folder in Path("/sys/fs/cgroup").glob(f"*/fltest-node-{node_name(index)}"):
            for sub in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [folder]:
                if sub.is_dir():
                    try:
                        sub.rmdir()
                    except OSError:
                        pass


def write_inventory(folder: Path, count: int, key: Path) -> Path:
    """An inventory with node 0 as the Ray head (the relay) and the others as workers."""
    hosts = {
        node_name(i): {
            "ansible_host": f"{NETWORKS['uplink'][1]}.{10 + i}",
            "cluster_ip": f"{NETWORKS['cluster'][1]}.{10 + i}",
            "ray_num_cpus": 1,
        }
        for i in range(count)
    }
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "fltest_image": TAG,
                "ansible_ssh_common_args": f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={folder / 'known_hosts'}",
                "fltest_controller_dir": str(folder / "controller"),
            },
            "children": {
                "ray_head": {"hosts": {node_name(0): hosts[node_name(0)]}},
                "ray_workers": {"hosts": {name: hosts[name] for name in list(hosts)[1:]}},
            },
        }
    }
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def cluster_yml(inventory: Path, folder: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """``ansible-playbook cluster.yml <args>`` on the bench's nodes, and its wall time."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(folder / "ansible-local"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    start = time.monotonic()
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "cluster.yml", *args],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=env,
    )
    return result, time.monotonic() - start


def received(count: int) -> dict[str, int]:
    """Bytes each network has brought to the nodes so far, summed over the nodes (interfaces found by their MAC)."""
    totals = dict.fromkeys(NETWORKS, 0)
    for index in range(count):
        attrs = json.loads(docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", node_name(index)).stdout)
        counters = json.loads(docker("exec", node_name(index), "python3", "-c", COUNTERS).stdout)
        by_mac = dict(counters.values())
        for key, (network, _) in NETWORKS.items():
            totals[key] += by_mac[attrs[network]["MacAddress"]]
    return totals


def forget_images(count: int) -> None:
    """Every node without the bench's image, the relay without its archives: the state of fresh nodes."""
    for index in range(count):
        docker("exec", node_name(index), "docker", "image", "rm", "--force", TAG, check=False)
        docker("exec", node_name(index), "rm", "-rf", RELAY_DIR)


def measure(distribution: str, count: int, inventory: Path, folder: Path) -> dict:
    """One ``cluster.yml --tags images`` with ``distribution`` onto nodes that lack the image."""
    forget_images(count)
    before = received(count)
    result, seconds = cluster_yml(
        inventory, folder, "--tags", "images", "-e", f"fltest_images_distribution={distribution}"
    )
    if result.returncode != 0:
        raise SystemExit(f"cluster.yml ({distribution}) failed: {result.stdout[-3000:]}")
    after = received(count)
    return {
        "distribution": distribution,
        "nodes": count,
        "wall_s": round(seconds, 1),
        **{f"{key}_bytes": after[key] - before[key] for key in NETWORKS},
    }


def main() -> None:
    """Print one line a distribution, and write every figure to ``--json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--json", type=Path, default=REPO / "results" / "bench-images.json")
    args = parser.parse_args()
    build_node_image(print)
    docker("tag", IMAGE, TAG)
    size = int(docker("image", "inspect", "--format", "{{.Size}}", TAG).stdout)
    folder = Path(tempfile.mkdtemp(prefix="fltest-bench-images-"))
    key = folder / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    rows = []
    try:
        start_nodes(args.nodes, key)
        inventory = write_inventory(folder, args.nodes, key)
        prepared, seconds = cluster_yml(inventory, folder, "--tags", "docker")  # Docker on the nodes (and a first load)
        if prepared.returncode != 0:
            raise SystemExit(f"cluster.yml --tags docker failed: {prepared.stdout[-3000:]}")
        print(f"nodes prepared (Docker installed): {seconds:.0f} s")
        for distribution in DISTRIBUTIONS:
            rows.append(measure(distribution, args.nodes, inventory, folder))
    finally:
        remove_nodes(args.nodes)
        docker("image", "rm", TAG, check=False)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"image {IMAGE}: {size / 1e9:.2f} GB; {args.nodes} nodes")
    print(f"{'distribution':14} {'wall s':>8} {'controller uplink GB':>21} {'cluster network GB':>19}")
    for row in rows:
        print(
            f"{row['distribution']:14} {row['wall_s']:>8.0f} {row['uplink_bytes'] / 1e9:>21.2f} {row['cluster_bytes'] / 1e9:>19.2f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"image": IMAGE, "image_bytes": size, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
