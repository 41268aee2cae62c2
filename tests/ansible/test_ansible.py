"""The Ansible playbooks: syntax, ansible-lint (production profile), and an end-to-end run over SSH
against emulated lab nodes (containers with sshd and their own dockerd, images/node/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conformance import assert_conforms

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
PLAYBOOKS = ["cluster.yml", "run.yml", "teardown.yml"]
NODE_IMAGE = "fltest-node:bookworm"
SOURCE_IMAGE = os.environ.get("FLTEST_IMAGE", "fltest:0.1.0")
TEST_IMAGE = "fltest:ansible-e2e"  # a tag of SOURCE_IMAGE's id, so a rebuild elsewhere cannot change it mid-test
NETWORK = "fltest-ansible-e2e"
SUBNET = "172.31.250.0/24"
NODES = {"e2e-head": "172.31.250.11", "e2e-worker": "172.31.250.12"}
# Everything --privileged gives a nested dockerd, less CAP_SYS_RESOURCE (absent from this engine's
# bounding set, so --privileged itself fails here).
NODE_FLAGS = ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
              "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
              "--device-cgroup-rule", "a *:* rwm", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
              "--tmpfs", "/run", "--tmpfs", "/tmp"]  # fmt: skip


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {BIN}: pip install -e '.[test]'")
    return str(path)


def ansible_env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
            "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}  # fmt: skip


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook, tmp_path):
    result = subprocess.run([tool("ansible-playbook"), "-i", "inventory/sample/hosts.yml", "--syntax-check", playbook],
                            cwd=ANSIBLE, capture_output=True, text=True, env=ansible_env(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile(tmp_path):
    result = subprocess.run([tool("ansible-lint"), "--offline", "--profile", "production", "--strict", *PLAYBOOKS, "roles"],
                            cwd=ANSIBLE, capture_output=True, text=True, env=ansible_env(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: host -> {ok, changed, failed, unreachable, ...}."""
    rows = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output.split("PLAY RECAP")[-1], re.M):
        rows[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return rows


def sshd_answers(ip: str) -> bool:
    """Whether an SSH server greets on ``ip``:22."""
    try:
        with socket.create_connection((ip, 22), timeout=2) as connection:
            return connection.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def engine_answers() -> bool:
    try:
        return docker("version", "--format", "{{.Server.Version}}", check=False).returncode == 0
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def lab(tmp_path_factory, fltest_image):
    """Two emulated nodes reachable over SSH (Debian with no Docker yet), an inventory for them, torn down afterwards."""
    if not engine_answers():
        pytest.skip("no Docker engine answers (docker version failed)")
    docker("build", "-t", NODE_IMAGE, str(REPO / "images" / "node"))  # cached layers: seconds when unchanged
    tmp = tmp_path_factory.mktemp("ansible-lab")
    os.chmod(tmp, 0o700)
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    docker("tag", SOURCE_IMAGE, TEST_IMAGE)
    for name in NODES:  # a run killed earlier may have left them
        docker("rm", "--force", "--volumes", f"fltest-ansible-{name}", check=False)
    docker("network", "rm", NETWORK, check=False)
    docker("network", "create", "--subnet", SUBNET, NETWORK)
    try:
        for name, ip in NODES.items():
            docker("run", "--detach", "--name", f"fltest-ansible-{name}", "--hostname", name, "--network", NETWORK,
                   "--ip", ip, *NODE_FLAGS, "--volume", f"{key}.pub:/root/.ssh/authorized_keys.mounted:ro", NODE_IMAGE)  # fmt: skip
        head, worker = NODES
        inventory = {"all": {
            "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(key),
                     "ansible_ssh_common_args": f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={tmp / 'known_hosts'}",
                     "fltest_image": TEST_IMAGE, "fltest_controller_dir": str(tmp / "controller")},
            "children": {"ray_head": {"hosts": {head: {"ansible_host": NODES[head], "cluster_ip": NODES[head], "ray_num_cpus": 1}}},
                         "ray_workers": {"hosts": {worker: {"ansible_host": NODES[worker], "cluster_ip": NODES[worker], "ray_num_cpus": 1}}}},
        }}  # fmt: skip
        (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(sshd_answers(ip) for ip in NODES.values()):
            time.sleep(1)
        yield tmp
    finally:
        if (tmp / "hosts.yml").exists():
            down = playbook(tmp, "teardown.yml")
            print(f"teardown.yml: rc={down.returncode} {recap(down.stdout)}")
        for name in NODES:
            docker("rm", "--force", "--volumes", f"fltest-ansible-{name}", check=False)
        docker("network", "rm", NETWORK, check=False)
        for name in NODES:  # the nodes' dockerd made these (--cgroup-parent); empty once the nodes are gone
            for folder in Path("/sys/fs/cgroup").glob(f"*/fltest-node-{name}"):
                for sub in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [folder]:
                    if sub.is_dir():
                        try:
                            sub.rmdir()
                        except OSError:
                            pass
        docker("image", "rm", TEST_IMAGE, check=False)  # the tag only; the image stays
        shutil.rmtree(tmp, ignore_errors=True)  # the SSH key, the Ray token, image archives


def playbook(tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("ansible-playbook"), "-i", str(tmp / "hosts.yml"), name, *args],
                          cwd=ANSIBLE, capture_output=True, text=True, env=ansible_env(tmp))  # fmt: skip


def run_yml(tmp: Path, config: Path, results: Path) -> subprocess.CompletedProcess:
    """run.yml with ``config``, its results fetched into ``results``."""
    return playbook(tmp, "run.yml", "-e", f"fltest_run_config={config}", "-e", f"fltest_run_results_dir={results}")


def experiment(folder: Path) -> Path:
    folder.mkdir()
    (folder / "digits_hooks.py").write_text((REPO / "examples" / "digits_hooks.py").read_text())
    config = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    config.update(name="ansible-e2e", clients=4, total_cpus=2)
    config["training"].update(rounds=2, local_epochs=1, round_timeout_s=60)
    config["runs"] = [{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr"}]
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def node_state(name: str) -> tuple[bool, bool]:
    """Whether an emulated node has the docker CLI, and whether /etc/fltest exists there."""
    has = [docker("exec", f"fltest-ansible-{name}", "test", "-e", path, check=False).returncode == 0 for path in ("/usr/bin/docker", "/etc/fltest")]
    return has[0], has[1]


def test_end_to_end(lab):
    timings = {}
    start = time.monotonic()
    fresh = playbook(lab, "cluster.yml", "--check")  # nodes with nothing deployed yet
    timings["cluster.yml --check (fresh nodes)"] = time.monotonic() - start
    assert fresh.returncode == 0, fresh.stdout[-6000:] + fresh.stderr[-3000:]
    assert all(node_state(name) == (False, False) for name in NODES), "--check changed a node"

    start = time.monotonic()
    first = playbook(lab, "cluster.yml")
    timings["cluster.yml (first)"] = time.monotonic() - start
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in first.stdout
    for name in NODES:  # Docker came from Debian's docker.io, installed and started by fltest_docker
        installed = docker("exec", f"fltest-ansible-{name}", "dpkg-query", "--show", "--showformat", "${Status}", "docker.io").stdout
        assert installed == "install ok installed", (name, installed)
        assert "Docker is running" in docker("exec", f"fltest-ansible-{name}", "service", "docker", "status").stdout
    assert all(row["failed"] == 0 and row["unreachable"] == 0 for row in recap(first.stdout).values())
    token = docker("exec", "fltest-ansible-e2e-head", "stat", "-c", "%a %u", "/etc/fltest/ray_token").stdout.split()
    assert token == ["600", "10001"]
    assert "ray_token" not in os.listdir(ANSIBLE)

    start = time.monotonic()
    second = playbook(lab, "cluster.yml")
    timings["cluster.yml (again)"] = time.monotonic() - start
    assert second.returncode == 0, second.stdout[-6000:]
    rows = recap(second.stdout)
    assert set(rows) >= set(NODES) and all(row["changed"] == 0 for row in rows.values()), second.stdout[-6000:]

    for host in reversed(list(NODES)):  # a play limited to one node finds the others in the inventory
        limited = playbook(lab, "cluster.yml", "--limit", host)
        assert limited.returncode == 0, (host, limited.stdout[-6000:])
        assert recap(limited.stdout)[host]["changed"] == 0, (host, limited.stdout[-6000:])
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in limited.stdout  # --limit e2e-worker skips the wait; e2e-head ran it

    start = time.monotonic()
    check = playbook(lab, "cluster.yml", "--check")
    timings["cluster.yml --check"] = time.monotonic() - start
    assert check.returncode == 0, check.stdout[-6000:]

    config = experiment(lab / "experiment")
    results = lab / "results"
    start = time.monotonic()
    run = run_yml(lab, config, results)
    timings["run.yml"] = time.monotonic() - start
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    summary = results / "ansible-e2e"
    assert summary.is_dir() and any(summary.rglob("*.json")), sorted(p.name for p in results.rglob("*"))
    for name in NODES:  # the staged folder is gone from every node
        left = docker("exec", f"fltest-ansible-{name}", "ls", "/var/lib/fltest/work/runs").stdout.split()
        assert left == [], (name, left)
    secret = (lab / "controller" / "ray_token").read_text().strip()
    for output in (first.stdout, second.stdout, run.stdout):
        assert secret not in output
    print("timings:", json.dumps({k: round(v, 1) for k, v in timings.items()}))


def flower_experiment(folder: Path, superlink: str, ca: Path) -> Path:
    folder.mkdir()
    config = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    config.pop("hooks")
    config.update(name="ansible-flower", clients=len(NODES))
    config["training"].update(rounds=2, local_epochs=1, round_timeout_s=60)
    config["output"] = {"save_round_models": True}
    options = {"mode": "deployment", "superlink": superlink, "root_certificates": str(ca)}
    config["runs"] = [{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr", "options": options}]
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def online_supernodes(controller: Path) -> list[dict]:
    """The SuperNodes the SuperLink lists, through the controller's flwr connection."""
    env = {**os.environ, "FLWR_HOME": str(controller / "flower" / "flwr-home")}
    listed = subprocess.run([str(BIN / "flwr"), "supernode", "list", "fltest", "--format", "json"], capture_output=True, text=True, env=env)
    return json.loads(listed.stdout).get("nodes", []) if listed.stdout.strip().startswith("{") else []


def test_flower_experiment_on_supernodes(lab):
    """The SuperLink on the head node, a SuperNode on each node: keys made on the nodes, registered,
    online; run.yml ships each node its partition and the Flower run matches the reference."""
    inventory = yaml.safe_load((lab / "hosts.yml").read_text())
    head, worker = NODES
    inventory["all"]["children"].update(superlink={"hosts": {head: {}}},
                                        supernodes={"hosts": {head: {"supernode_partition_id": 0}, worker: {"supernode_partition_id": 1}}})  # fmt: skip
    (lab / "hosts.yml").write_text(yaml.safe_dump(inventory))
    timings = {}
    start = time.monotonic()
    first = playbook(lab, "cluster.yml")
    timings["cluster.yml with Flower (first)"] = time.monotonic() - start
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    controller = lab / "controller"
    assert not any(p.name == "id_ecdsa" for p in controller.rglob("*")), "a private key reached the controller"
    for name in NODES:
        assert (controller / "flower" / "supernodes" / f"{name}.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
        mode = docker("exec", f"fltest-ansible-{name}", "stat", "-c", "%a %u", "/etc/fltest/flower/supernode/id_ecdsa").stdout.split()
        assert mode == ["600", "10001"]
        mounts = json.loads(docker("exec", f"fltest-ansible-{name}", "docker", "inspect", "--format", "{{json .Mounts}}", "fltest-supernode").stdout)
        assert {m["Destination"]: m["RW"] for m in mounts} == {"/run/secrets/supernode": False, "/run/secrets/tls/ca.crt": False,
                                                              "/var/lib/fltest/partitions": False}  # fmt: skip
    deadline, nodes = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        nodes = online_supernodes(controller)
        if len(nodes) == len(NODES) and all(n.get("status") == "online" for n in nodes):
            break
        time.sleep(2)
    assert [n["status"] for n in nodes] == ["online"] * len(NODES), nodes
    again = playbook(lab, "cluster.yml")
    assert again.returncode == 0 and all(r["changed"] == 0 for r in recap(again.stdout).values()), again.stdout[-6000:]

    config = flower_experiment(lab / "flower-experiment", f"{NODES[head]}:8000", controller / "flower" / "tls" / "ca.crt")
    results = lab / "flower-results"
    start = time.monotonic()
    run = run_yml(lab, config, results)
    timings["run.yml (Flower deployment)"] = time.monotonic() - start
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    experiment_dir = results / "ansible-flower"
    summary = json.loads((experiment_dir / "flower" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2, summary
    assert sorted(summary["client_hosts"]) == sorted(NODES)  # each partition trained on its own node
    assert_conforms(experiment_dir, "flower", 2)
    for name in NODES:
        link = docker("exec", f"fltest-ansible-{name}", "readlink", "/var/lib/fltest/flower/partitions/current").stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{8,}", link), (name, link)

    rerun = run_yml(lab, config, results)
    assert rerun.returncode == 0, rerun.stdout[-8000:]
    assert recap(rerun.stdout)[worker]["changed"] == 0, rerun.stdout[-6000:]  # its partition is already there

    mixed = yaml.safe_load(config.read_text())
    mixed["runs"].append({"name": "simulation", "framework": "flwr"})
    config.write_text(yaml.safe_dump(mixed))
    refused = run_yml(lab, config, results)
    assert refused.returncode != 0 and "split them into two configs" in refused.stdout, refused.stdout[-4000:]
    print("timings:", json.dumps({k: round(v, 1) for k, v in timings.items()}))
