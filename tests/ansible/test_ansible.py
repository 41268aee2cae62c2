"""The Ansible playbooks: syntax, ansible-lint (production profile), and an end-to-end run over SSH
against emulated lab nodes (containers with sshd and their own dockerd, images/node/)."""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.images import one_build_at_a_time
from deploy.kit import KIT, KIT_FILE, env_file_values
from tests.ansible import inventory_editor
from tests.conformance import TOLERANCE, assert_conforms
from tests.control_probe import PROBE, check_refusals, probes
from tests.doc_blocks import block_steps, doc_block, run_block, user_checkout

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
PLAYBOOKS = ["cluster.yml", "run.yml", "stop.yml", "teardown.yml", "status.yml", "flwr.yml"]
APP = REPO / "tests" / "flower_app"  # the tests' own Flower App (2 rounds; final_model.npz; client-<partition id>.txt)
TIER = "ansible tier"  # the prefix of this tier's progress lines (tests/conftest.py: progress)
NODE_IMAGE = f"fltest-node:{KIT.debian_release}"  # built on the kit's base image: the nodes run its Debian release
SOURCE_IMAGE = os.environ.get("FLTEST_IMAGE", KIT.image)
TEST_IMAGE = "fltest:ansible-e2e"  # a tag of SOURCE_IMAGE's id, so a rebuild elsewhere cannot change it mid-test
NETWORK = "fltest-ansible-e2e"
# Outside Docker's default address pools (172.17-172.31.0.0/16, 192.168.0.0/16 in /20s), which Docker 20.10 hands
# out in turn, not lowest first: 172.31.250.0/24 collided with a network the docker tier had just been given, on an
# engine that had made many networks before ("docker network create" exit 1 at the lab's set-up).
SUBNET = "172.16.250.0/24"
NODES = {"e2e-head": "172.16.250.11", "e2e-worker": "172.16.250.12"}
# Everything --privileged gives a nested dockerd, less CAP_SYS_RESOURCE (absent from this engine's
# bounding set, so --privileged itself fails here).
NODE_FLAGS = [
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
    "--device-cgroup-rule",
    "a *:* rwm",
    "--volume",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/tmp",
]


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {BIN}: pip install -e '.[test]'")
    return str(path)


def ansible_env(home: Path) -> dict[str, str]:
    """The environment a user runs ansible-playbook in, with ``home`` as HOME (where ``~/.fltest/<lab>`` is)."""
    return {
        **os.environ,
        "HOME": str(home),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook, tmp_path):
    result = subprocess.run(
        [tool("ansible-playbook"), "-i", "inventory/sample/hosts.yml", "--syntax-check", playbook],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=ansible_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile(tmp_path):
    result = subprocess.run(
        [tool("ansible-lint"), "--offline", "--profile", "production", "--strict", *PLAYBOOKS, "roles"],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=ansible_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def recap_rows(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: host -> {ok, changed, failed, unreachable, ...} (empty when there is none)."""
    rows = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output.split("PLAY RECAP")[-1], re.M):
        rows[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return rows


def recap(output: str) -> dict[str, dict[str, int]]:
    """:func:`recap_rows`, holding at least one emulated node's row, or the test fails: ``all(...)`` over it is never vacuous."""
    rows = recap_rows(output)
    assert set(rows) & set(NODES), f"no PLAY RECAP row for the nodes: {output[-3000:]}"
    return rows


def task_outcomes(output: str, task: str) -> dict[str, set[str]]:
    """host -> the outcomes (ok, changed, skipping, failed, fatal) of every TASK [<task>] block in ``output``."""
    outcomes: dict[str, set[str]] = {}
    for block in re.split(r"^(?:TASK|RUNNING HANDLER|PLAY|PLAY RECAP) \[?", output, flags=re.M)[1:]:
        if block.startswith(task + "]"):
            for outcome, host in re.findall(r"^(ok|changed|skipping|failed|fatal): \[([^\]]+)\]", block, re.M):
                outcomes.setdefault(host, set()).add(outcome)
    return outcomes


class Stages:
    """Runs playbooks and prints one line a stage as it ends: ``[ansible tier] <stage>: <outcome> (<s> s)``."""

    def __init__(self, report):
        self.report = report  # tests/conftest.py's progress, bound to TIER
        self.timings: dict[str, float] = {}

    def done(self, stage: str, outcome: str, seconds: float) -> None:
        self.timings[stage] = seconds
        self.report(f"{stage}: {outcome} ({seconds:.0f} s)")

    def play(self, lab: Path, name: str, *args: str, stage: str = "") -> subprocess.CompletedProcess:
        """Run a playbook on the lab as one stage."""
        return self.run(stage or " ".join((name, *args)), functools.partial(playbook, lab, name, *args))

    def run(self, stage: str, command: Callable[[], subprocess.CompletedProcess]) -> subprocess.CompletedProcess:
        """Run ``command`` (playbooks) as one stage: its line says its exit code and the changes its recaps count."""
        start = time.monotonic()
        result = command()
        changed = sum(row.get("changed", 0) for row in recap_rows(result.stdout).values())
        self.done(stage, f"rc={result.returncode} changed={changed}", time.monotonic() - start)
        return result


def build_node_image(report) -> None:
    """Build images/node/ as NODE_IMAGE and leave no untagged image behind: the build it replaces is removed."""
    start = time.monotonic()
    with one_build_at_a_time(report):  # the docker tier counts untagged images meanwhile: a step in progress is one
        old = docker("image", "inspect", "--format", "{{.Id}}", NODE_IMAGE, check=False).stdout.strip()
        docker(
            "build",
            "--force-rm",
            "--build-arg",
            f"BASE_IMAGE={KIT.base_image}",
            "-t",
            NODE_IMAGE,
            str(REPO / "images" / "node"),
        )  # cached layers: seconds when unchanged
        new = docker("image", "inspect", "--format", "{{.Id}}", NODE_IMAGE).stdout.strip()
        if old and old != new:
            docker("image", "rm", old, check=False)  # untagged now; its untagged parent layers go with it
    report(f"node image {NODE_IMAGE}: {'unchanged' if old == new else 'built'} ({time.monotonic() - start:.0f} s)")
    dangling = docker(
        "images", "--quiet", "--filter", "dangling=true", "--filter", "label=fltest.image=node"
    ).stdout.split()
    assert dangling == [], f"untagged node images left behind: {dangling}"


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
def lab(tmp_path_factory, fltest_image, progress):
    """Two emulated nodes reachable over SSH (Debian with no Docker yet), and the user's inventory for them: a copy of
    the checkout (the repository as a user has it) where first-lab.md's inventory block made ``inventory/mylab``, with
    an ``$EDITOR`` that makes the page's edits. Yields that inventory folder; torn down afterwards."""
    if not engine_answers():
        pytest.skip("no Docker engine answers (docker version failed)")
    report = functools.partial(progress, TIER)
    for name in NODES:  # a run killed earlier may have left them (and they would hold the node image)
        docker("rm", "--force", "--volumes", f"fltest-ansible-{name}", check=False)
    build_node_image(report)
    tmp = tmp_path_factory.mktemp(f"fltest-e2e-{secrets.token_hex(3)}")
    os.chmod(tmp, 0o700)
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    checkout = user_checkout(tmp / "fltest")
    inventory = checkout / "ansible" / "inventory" / "mylab"
    home_of(inventory).mkdir(mode=0o700)
    docker("tag", SOURCE_IMAGE, TEST_IMAGE)
    docker("network", "rm", NETWORK, check=False)
    docker("network", "create", "--subnet", SUBNET, NETWORK)
    try:
        for name, ip in NODES.items():
            docker(
                "run",
                "--detach",
                "--name",
                f"fltest-ansible-{name}",
                "--hostname",
                name,
                "--network",
                NETWORK,
                "--ip",
                ip,
                *NODE_FLAGS,
                "--volume",
                f"{key}.pub:/root/.ssh/authorized_keys.mounted:ro",
                NODE_IMAGE,
            )
        made = run_block(
            doc_block("first-lab/inventory"),
            cwd=checkout,
            env={**ansible_env(home_of(inventory)), **editor_environment(tmp, key)},
        )
        report(f"first-lab.md: first-lab/inventory: exit {made.returncode}")
        assert made.returncode == 0, made.stdout + made.stderr
        start = time.monotonic()
        while time.monotonic() < start + 60 and not all(sshd_answers(ip) for ip in NODES.values()):
            time.sleep(1)
        up = [name for name, ip in NODES.items() if sshd_answers(ip)]
        report(f"nodes up: {len(up)} of {len(NODES)} answer on SSH ({time.monotonic() - start:.0f} s)")
        yield inventory
    finally:
        if (inventory / "hosts.yml").exists():
            Stages(report).play(inventory, "teardown.yml")
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
        shutil.rmtree(tmp, ignore_errors=True)  # the SSH key, the checkout and its inventory, the controller's files


def editor_environment(tmp: Path, key: Path) -> dict[str, str]:
    """The environment of an ``$EDITOR`` that makes first-lab.md's edits to the files it is given."""
    settings = {"nodes": NODES, "key": str(key), "known_hosts": str(tmp / "known_hosts"), "image": TEST_IMAGE}
    return {
        "EDITOR": f"{sys.executable} {Path(inventory_editor.__file__)}",
        inventory_editor.SETTINGS_VARIABLE: json.dumps(settings),
    }


def checkout_of(lab: Path) -> Path:
    """The user's copy of the repository that holds the lab's inventory folder ``lab`` (``ansible/inventory/<lab>``)."""
    return lab.parents[2]


def home_of(lab: Path) -> Path:
    """The HOME of the user who runs the lab's playbooks: beside their checkout."""
    return lab.parents[3] / "home"


def controller_dir(lab: Path) -> Path:
    """Where the controller keeps the lab's token, CA, keys and archives: the sample's default, ~/.fltest/<inventory name>."""
    return home_of(lab) / ".fltest" / lab.name


def playbook_command(lab: Path, name: str, *args: str) -> list[str]:
    """``ansible-playbook -i inventory/<lab>/hosts.yml <name> <args>``, as the pages write it (run in ``ansible/``)."""
    return [tool("ansible-playbook"), "-i", f"inventory/{lab.name}/hosts.yml", name, *args]


def playbook(lab: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """Run a playbook of the user's checkout on the lab, as a user does from its ``ansible/`` folder."""
    return subprocess.run(
        playbook_command(lab, name, *args),
        cwd=checkout_of(lab) / "ansible",
        capture_output=True,
        text=True,
        env=ansible_env(home_of(lab)),
    )


def run_vars(config: Path, results: Path) -> list[str]:
    """run.yml's extra variables: the experiment ``config``, its results fetched into ``results``."""
    return ["-e", f"fltest_run_config={config}", "-e", f"fltest_run_results_dir={results}"]


def run_yml(lab: Path, config: Path, results: Path) -> subprocess.CompletedProcess:
    """run.yml with ``config``, its results fetched into ``results``."""
    return playbook(lab, "run.yml", *run_vars(config, results))


# The rounds of a run a stage stops: more than any stage lasts. 300 rounds (about 0.2 s each here) once ended by
# themselves while run.yml refused a second run and stop.yml started (64 s): the "stopped" run was completed.
LONG_RUN_ROUNDS = 100_000


def experiment(folder: Path, name: str = "ansible-e2e", rounds: int = 2, reference: bool = True) -> Path:
    """A digits config with a Flower simulation (for the cluster) after a reference run, unless ``reference`` is false
    (a run a stage stops: the reference would first run all its rounds)."""
    folder.mkdir()
    (folder / "digits_hooks.py").write_text((REPO / "examples" / "digits_hooks.py").read_text())
    config = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    config.update(name=name, clients=4, total_cpus=2)
    config["training"].update(rounds=rounds, local_epochs=1, round_timeout_s=60)
    flower = {"name": "flower", "framework": "flwr"}
    config["runs"] = [{"name": "reference", "framework": "reference"}, flower] if reference else [flower]
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


HARDENING = yaml.safe_load((ANSIBLE / "roles" / "fltest_hardening" / "defaults" / "main.yml").read_text())


def assert_hardened(node: str, container: str) -> dict:
    """Check the hardening flags on ``container`` of emulated node ``node`` (docker inspect HostConfig); returns it."""
    host_config = json.loads(
        docker(
            "exec", f"fltest-ansible-{node}", "docker", "inspect", "--format", "{{json .HostConfig}}", container
        ).stdout
    )
    assert host_config["CapDrop"] == HARDENING["fltest_hardening_cap_drop"], (node, container, host_config["CapDrop"])
    assert set(HARDENING["fltest_hardening_security_opts"]) <= set(host_config["SecurityOpt"] or []), (
        node,
        container,
        host_config["SecurityOpt"],
    )
    assert host_config["ReadonlyRootfs"] is True, (node, container)
    assert host_config["Memory"] > 0 and host_config["MemorySwap"] == host_config["Memory"], (
        node,
        container,
        host_config["Memory"],
    )
    assert (host_config["PidsLimit"] or 0) > 0, (node, container, host_config["PidsLimit"])
    assert set(host_config["Tmpfs"] or {}) == {
        entry.split(":")[0].replace("{{ fltest_kit_home }}", KIT.home) for entry in HARDENING["fltest_hardening_tmpfs"]
    }, (node, container)
    return host_config


def stop_timeout(node: str, container: str) -> int:
    """The seconds ``docker stop`` gives ``container`` on emulated node ``node`` (its ``--stop-timeout``)."""
    inspected = docker(
        "exec", f"fltest-ansible-{node}", "docker", "inspect", "--format", "{{json .Config.StopTimeout}}", container
    )
    return json.loads(inspected.stdout)


def stop_events(node: str, container: str, since: str) -> list[dict]:
    """The kill and die events of ``container`` on emulated node ``node`` since ``since`` (the node's epoch seconds)."""
    until = docker("exec", f"fltest-ansible-{node}", "date", "+%s").stdout.strip()
    listed = docker(
        "exec",
        f"fltest-ansible-{node}",
        "docker",
        "events",
        "--since",
        since,
        "--until",
        until,
        "--filter",
        f"container={container}",
        "--filter",
        "event=kill",
        "--filter",
        "event=die",
        "--format",
        "{{json .}}",
    ).stdout
    return [json.loads(line) for line in listed.splitlines() if line.strip()]


def node_state(name: str) -> tuple[bool, bool]:
    """Whether an emulated node has the docker CLI, and whether /etc/fltest exists there."""
    has = [
        docker("exec", f"fltest-ansible-{name}", "test", "-e", path, check=False).returncode == 0
        for path in ("/usr/bin/docker", "/etc/fltest")
    ]
    return has[0], has[1]


@pytest.fixture
def stages(progress):
    return Stages(functools.partial(progress, TIER))


def failing_experiment(folder: Path) -> Path:
    """A config whose one run fails (a hook raises): fltest run exits 1."""
    folder.mkdir()
    (folder / "failing_hooks.py").write_text(
        "def after_local_training(partition_id, server_round, old_params, new_params):\n    raise RuntimeError('planted failure')\n"
    )
    config = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    config.update(name="ansible-failing", clients=2, total_cpus=2, hooks="failing_hooks")
    config["training"].update(rounds=1, local_epochs=1, round_timeout_s=60)
    config["runs"] = [{"name": "reference", "framework": "reference"}]
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def owners(folder: Path) -> set[int]:
    """The uids owning ``folder`` and everything in it."""
    return {p.stat().st_uid for p in [folder, *folder.rglob("*")]}


def status_lines(output: str) -> dict[str, str]:
    """status.yml's per-node lines: host -> its line."""
    return dict(re.findall(r'^\s+"([\w.-]+): (.*)",?$', output, re.M))


def test_a_node_of_an_unsupported_os_release_fails_cluster_yml_in_one_line_before_any_install(lab, stages):
    # The nodes run the kit's Debian release; a support list without it makes them unsupported nodes, as a node of
    # another release (an old Ubuntu, Debian 11) would be by the role's own list.
    release = docker("exec", "fltest-ansible-e2e-head", "sh", "-c", ". /etc/os-release; echo $VERSION_CODENAME").stdout
    version = docker("exec", "fltest-ansible-e2e-head", "cat", "/etc/debian_version").stdout.strip()
    refused = stages.play(
        lab, "cluster.yml", "-e", json.dumps({"fltest_docker_supported_os": {"Debian": ["11"], "Ubuntu": ["24.04"]}})
    )
    assert refused.returncode != 0
    for name in NODES:
        line = f"{name}: Debian {version} ({release.strip()}) is not supported; FLTest's roles support Debian 11; Ubuntu 24.04"
        failures = [row for row in refused.stdout.splitlines() if row.startswith(f"fatal: [{name}]")]
        assert len(failures) == 1 and f'"msg": "{line}"' in failures[0], refused.stdout[-3000:]
        assert node_state(name) == (False, False), "a refused node was changed"
    assert "fltest_docker : Look for the docker CLI" not in refused.stdout  # the check is the first task


def page_steps(lab: Path, stages: Stages, block_id: str, folder: str = "") -> Iterator[subprocess.CompletedProcess]:
    """Run a page's block one command at a time (tests/doc_blocks.py's block_steps) in the user's checkout, or its
    ``folder`` (where the page left the reader), as the lab's user; yields each command's outcome once it ran."""
    for number, step in enumerate(block_steps(doc_block(block_id)), start=1):
        run = functools.partial(
            run_block, step, cwd=checkout_of(lab) / folder, env=ansible_env(home_of(lab)), timeout=1800
        )
        yield stages.run(f"{block_id} ({number})", run)


def test_end_to_end(lab, stages):
    """first-lab.md's deploy block on fresh nodes, then what a lab's life brings: a second run, --limit, --tags, a
    new token, the page's run block, refusals, Ctrl-C, a killed run.yml, a setting changed (upgrading.md's block),
    a node removed and added back, a stopped and a killed node."""
    deploy = page_steps(lab, stages, "first-lab/cluster")
    check = next(deploy)  # cluster.yml --check on fresh nodes
    assert check.returncode == 0, check.stdout[-6000:] + check.stderr[-3000:]
    assert all(node_state(name) == (False, False) for name in NODES), "--check changed a node"
    # What the first run will do is reported as changes, not as skipped tasks.
    for task in (
        "fltest_images : Report the image loads that --check skips",
        "fltest_container : Report the container start that --check skips",
    ):
        outcomes = task_outcomes(check.stdout, task)
        assert all(outcomes.get(name) == {"changed"} for name in NODES), (task, outcomes, check.stdout[-6000:])
    assert all(row["changed"] > 0 for row in recap(check.stdout).values())

    first = next(deploy)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in first.stdout
    outcomes = task_outcomes(first.stdout, "fltest_images : Report the image loads that --check skips")
    assert outcomes == {name: {"skipping"} for name in NODES}, (outcomes, first.stdout[-6000:])  # --check's only
    # The image went from the controller to the head only, and from the head (the relay) to the worker: one archive
    # through the controller's uplink, whatever the number of nodes.
    sent = task_outcomes(
        first.stdout, "fltest_images : Send the relay the other archives from the controller, once each"
    )
    assert sent == {"e2e-head": {"changed"}}, (sent, first.stdout[-6000:])
    fetched = task_outcomes(first.stdout, "fltest_images : Fetch the image archive from the relay")
    assert fetched == {"e2e-head": {"skipping"}, "e2e-worker": {"changed"}}, (fetched, first.stdout[-6000:])
    # ports.md: the relay's port is open only while a node fetches: its server is gone, nothing answers on 8973.
    relays = docker(
        "exec", "fltest-ansible-e2e-head", "docker", "ps", "--all", "--quiet", "--filter", "name=fltest-image"
    )
    assert relays.stdout.split() == [], relays.stdout
    probe = node_probe("e2e-worker", [[NODES["e2e-head"], 8973, "GET", "/"]])
    assert probe == {f"GET {NODES['e2e-head']}:8973/": "ConnectionRefusedError"}, probe
    for name in NODES:  # Docker came from Debian's docker.io, installed and started by fltest_docker
        installed = docker(
            "exec", f"fltest-ansible-{name}", "dpkg-query", "--show", "--showformat", "${Status}", "docker.io"
        ).stdout
        assert installed == "install ok installed", (name, installed)
        assert "Docker is running" in docker("exec", f"fltest-ansible-{name}", "service", "docker", "status").stdout
    rows = recap(first.stdout)
    assert all(row["failed"] == 0 and row["unreachable"] == 0 for row in rows.values())
    for name, container in zip(NODES, ("fltest-ray-head", "fltest-ray-worker")):
        assert_hardened(name, container)
    cache = f"HF_DATASETS_CACHE={env_file_values(KIT_FILE)['FLTEST_DATASETS_CACHE']}"  # the head's shards: on disk
    environments = {
        name: json.loads(
            docker(
                "exec", f"fltest-ansible-{name}", "docker", "inspect", "--format", "{{json .Config.Env}}", container
            ).stdout
        )
        for name, container in zip(NODES, ("fltest-ray-head", "fltest-ray-worker"))
    }
    assert cache in environments["e2e-head"] and cache not in environments["e2e-worker"], environments
    token = docker("exec", "fltest-ansible-e2e-head", "stat", "-c", "%a %u", "/etc/fltest/ray_token").stdout.split()
    assert token == ["600", "10001"]
    assert "ray_token" not in os.listdir(checkout_of(lab) / "ansible")
    assert (controller_dir(lab) / "ray_token").is_file()  # first-lab.md: ~/.fltest/<inventory name>, by default

    whole = next(deploy)  # status.yml
    assert whole.returncode == 0, whole.stdout[-6000:]
    assert "cluster whole: 2 Ray nodes alive (2 CPUs)" in whole.stdout, whole.stdout[-6000:]

    # -vvv prints every task's arguments and results: the token must stay out of them (no_log).
    second = stages.play(lab, "cluster.yml", "-vvv", stage="cluster.yml second run (-vvv)")
    assert second.returncode == 0, second.stdout[-6000:]
    rows = recap(second.stdout)
    assert set(rows) >= set(NODES) and all(row["changed"] == 0 for row in rows.values()), second.stdout[-6000:]

    for host in reversed(list(NODES)):  # a play limited to one node finds the others in the inventory
        limited = stages.play(lab, "cluster.yml", "--limit", host)
        assert limited.returncode == 0, (host, limited.stdout[-6000:])
        assert recap(limited.stdout)[host]["changed"] == 0, (host, limited.stdout[-6000:])
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in limited.stdout  # --limit e2e-worker skips the wait; e2e-head ran it

    check = stages.play(lab, "cluster.yml", "--check")
    assert check.returncode == 0, check.stdout[-6000:]
    assert all(row["changed"] == 0 for row in recap(check.stdout).values()), check.stdout[-6000:]

    # status.yml on the whole cluster: one line a node, exit 0, nothing changed (also under --check).
    for args in ((), ("--check",)):
        status = stages.play(lab, "status.yml", *args, stage=" ".join(("status.yml", *args, "(whole cluster)")))
        assert status.returncode == 0, status.stdout[-6000:]
        assert all(row["changed"] == 0 for row in recap(status.stdout).values()), status.stdout[-6000:]
        lines = status_lines(status.stdout)
        assert lines == {
            "e2e-head": "fltest-ray-head running; Ray node alive with 1 CPU",
            "e2e-worker": "fltest-ray-worker running; Ray node alive with 1 CPU",
        }, status.stdout[-6000:]
        assert "cluster whole: 2 Ray nodes alive (2 CPUs)" in status.stdout

    # --tags images prunes the controller's archive of an image no longer deployed and keeps the current one.
    archives = controller_dir(lab) / "images"
    current = sorted(archives.glob("*.tar"))
    stale = archives / f"sha256-{'0' * 64}.tar"
    stale.write_bytes(b"an archive of an image no longer in fltest_images_list")
    pruned = stages.play(lab, "cluster.yml", "--tags", "images", stage="cluster.yml --tags images (a stale archive)")
    assert pruned.returncode == 0, pruned.stdout[-6000:]
    assert not stale.exists() and current and sorted(archives.glob("*.tar")) == current

    # --tags ray plays the Ray roles and the wait only, and changes nothing on a whole cluster.
    ray_only = stages.play(lab, "cluster.yml", "--tags", "ray", stage="cluster.yml --tags ray")
    assert ray_only.returncode == 0 and all(r["changed"] == 0 for r in recap(ray_only.stdout).values()), (
        ray_only.stdout[-6000:]
    )
    played = set(re.findall(r"^TASK \[(\w+) : ", ray_only.stdout, re.M))
    assert played and played <= {
        "fltest_ray",
        "fltest_ray_head",
        "fltest_ray_worker",
        "fltest_container",
        "fltest_ray_ready",
        "fltest_gpu",
    }, played  # fltest_gpu: the node's GPU count, which Ray's command takes
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in ray_only.stdout

    # A new token on the controller reaches every Ray node and restarts its container (handler); the cluster
    # comes back whole with it, and the runs below use it.
    old_secret = (controller_dir(lab) / "ray_token").read_text().strip()
    started = {
        name: docker(
            "exec", f"fltest-ansible-{name}", "docker", "inspect", "--format", "{{.State.StartedAt}}", container
        ).stdout
        for name, container in zip(NODES, ("fltest-ray-head", "fltest-ray-worker"))
    }
    new_secret = secrets.token_hex(32)
    (controller_dir(lab) / "ray_token").write_text(new_secret)
    rotated = stages.play(lab, "cluster.yml", "--tags", "ray", stage="cluster.yml --tags ray (a new token)")
    assert rotated.returncode == 0 and "Ray cluster ready: 2 nodes, 2 CPUs" in rotated.stdout, rotated.stdout[-6000:]
    for name, container in zip(NODES, ("fltest-ray-head", "fltest-ray-worker")):
        assert docker("exec", f"fltest-ansible-{name}", "cat", "/etc/fltest/ray_token").stdout.strip() == new_secret, (
            name
        )
        restarted = docker(
            "exec", f"fltest-ansible-{name}", "docker", "inspect", "--format", "{{.State.StartedAt}}", container
        ).stdout
        assert restarted != started[name], f"{container} on {name} kept running with the old token"
    assert old_secret not in rotated.stdout and new_secret not in rotated.stdout

    # first-lab.md's run block: the shipped example, its results in the checkout's results/ (the page's $PWD/..).
    (run,) = page_steps(lab, stages, "first-lab/run", folder="ansible")
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    page_results = checkout_of(lab) / "results"
    # The results folder named is the controller's; the head's staged copy is gone by the time the play ends.
    said = re.findall(r'"msg": "results: (.*)"', run.stdout) + re.findall(r'^\s+"results: (.*)",?$', run.stdout, re.M)
    assert said == [f"{page_results}/digits-cluster (on the controller)"], run.stdout[-4000:]
    experiment_dir = page_results / "digits-cluster"
    summary = json.loads((experiment_dir / "flower" / "summary.json").read_text())
    assert summary["status"] == "completed" and set(summary["client_hosts"]) == set(NODES), summary  # on both nodes
    assert (experiment_dir / "report.png").is_file()
    comparison = {row["run"]: row for row in json.loads((experiment_dir / "comparison.json").read_text())["runs"]}
    assert comparison["flower"]["max_param_diff_vs_reference"] <= TOLERANCE, comparison["flower"]
    assert owners(page_results) == {os.getuid()}, (
        "results not owned by the user who ran ansible-playbook (10001 is the head's user)"
    )
    for name in NODES:  # the staged folder is gone from every node
        left = docker("exec", f"fltest-ansible-{name}", "ls", "/var/lib/fltest/work/runs").stdout.split()
        assert left == [], (name, left)
    secret = old_secret  # the token of the first and second runs (the run below used the new one)
    assert '"module_args"' in second.stdout  # -vvv did print task arguments, so the check below can catch a leak
    for output in (first.stdout, second.stdout, run.stdout):
        assert secret not in output and new_secret not in output

    config = experiment(lab / "experiment")
    results = lab / "results"
    # A Ray config whose hooks module is not beside it is refused on the controller, naming the user's file, before
    # anything reaches a node.
    unshipped = lab / "unshipped"
    unshipped.mkdir()
    lone = yaml.safe_load(config.read_text())
    lone.update(name="ansible-unshipped", hooks="missing_hooks")
    (unshipped / "experiment.yaml").write_text(yaml.safe_dump(lone))
    refused = stages.play(lab, "run.yml", *run_vars(unshipped / "experiment.yaml", results), stage="run.yml (no hooks)")
    assert refused.returncode == 2, refused.stdout[-4000:]
    assert f"{unshipped / 'experiment.yaml'}: hooks: no module 'missing_hooks'" in refused.stdout, refused.stdout[
        -4000:
    ]
    assert "Stage the config folder" not in refused.stdout
    assert not (results / "ansible-unshipped").exists()

    # A failed fltest run: the play fails, ansible-playbook exits 2, fltest's exit code is in the message.
    failing = failing_experiment(lab / "failing")
    failed = stages.play(
        lab,
        "run.yml",
        *run_vars(failing, results),
        stage="run.yml (a run that fails)",
    )
    assert failed.returncode == 2, failed.stdout[-6000:]
    assert "fltest run exited 1 (a run failed)" in failed.stdout, failed.stdout[-6000:]
    assert (results / "ansible-failing" / "reference" / "summary.json").is_file()
    assert owners(results) == {os.getuid()}

    # Ctrl-C on run.yml while fltest runs in the head: fltest stops there (SIGINT, through stop.yml beside the play),
    # its rounds and an "interrupted" summary reach the controller, ansible-playbook exits 130 with one line.
    stopped_config = experiment(lab / "interrupted", name="ansible-stopped", rounds=LONG_RUN_ROUNDS, reference=False)
    code, output, seconds = interrupt_run_yml(lab, stopped_config, results, "e2e-head", "ansible-stopped")
    stages.done("run.yml interrupted by Ctrl-C at round 2", f"rc={code}", seconds)
    assert code == 130, output[-6000:]
    assert output.strip().splitlines()[-1] == (
        f"ansible-playbook: interrupted (SIGINT): stopped fltest run on e2e-head (it exited 130);"
        f" its rounds so far and summary: {results}/ansible-stopped"
    ), output[-6000:]
    summary = json.loads((results / "ansible-stopped" / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["rounds_completed"] < LONG_RUN_ROUNDS, summary
    assert runs_in_head() == [] and staged_folders() == {name: [] for name in NODES}
    assert owners(results) == {os.getuid()}

    # run.yml killed outright: fltest runs on in the head; the next run.yml refuses, naming it and stop.yml, which
    # stops it and brings its results to the controller as <results>/<run id>/<experiment>/.
    orphan = start_run_yml(lab, stopped_config, results)
    try:
        wait_for_staged_round(orphan, "e2e-head", "ansible-stopped", 2)
    finally:
        orphan.kill()
        orphan.communicate()
    (left,) = runs_in_head()
    refused = stages.play(
        lab,
        "run.yml",
        *run_vars(config, results),
        stage="run.yml (another run still going on)",
    )
    assert refused.returncode == 2, refused.stdout[-6000:]
    assert re.search(
        rf"e2e-head: an experiment still runs in fltest-ray-head: fltest run of runs/{left['run_id']} \(pid {left['pid']}\); "
        rf"stop it and fetch its results with: ansible-playbook -i {re.escape(str(lab / 'hosts.yml'))} stop.yml",
        refused.stdout,
    ), refused.stdout[-6000:]
    rescued = lab / "rescued"
    stopped = stages.play(
        lab, "stop.yml", "-e", f"fltest_run_results_dir={rescued}", stage="stop.yml (the run left behind)"
    )
    assert stopped.returncode == 0, stopped.stdout[-6000:]
    assert f"fltest-ray-head: fltest run of runs/{left['run_id']} (pid {left['pid']}): stopped" in stopped.stdout, (
        stopped.stdout[-6000:]
    )
    summary = json.loads((rescued / left["run_id"] / "ansible-stopped" / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] >= 2, summary
    assert runs_in_head() == [] and staged_folders() == {name: [] for name in NODES}
    assert owners(rescued) == {os.getuid()}

    # upgrading.md's lab block after a role setting changed in the inventory: --check says what would change and
    # changes nothing; cluster.yml replaces each Ray container gracefully (SIGTERM, so Ray drains the node, never
    # SIGKILL; a worker may have ended first, with its head); status.yml finds the cluster whole.
    settings = lab / "group_vars" / "all.yml"
    settings.write_text(settings.read_text() + "fltest_ray_pids_limit: 4000\nfltest_ray_memory: 1500m\n")
    ray_containers = dict(zip(NODES, ("fltest-ray-head", "fltest-ray-worker")))
    before = {name: container_id(name, container) for name, container in ray_containers.items()}
    since = {name: docker("exec", f"fltest-ansible-{name}", "date", "+%s").stdout.strip() for name in NODES}
    upgrade = page_steps(lab, stages, "upgrading/lab")
    would = next(upgrade)
    assert would.returncode == 0 and all(row["changed"] > 0 for row in recap(would.stdout).values()), would.stdout[
        -6000:
    ]
    assert {name: container_id(name, container) for name, container in ray_containers.items()} == before
    replaced = next(upgrade)
    assert replaced.returncode == 0, replaced.stdout[-6000:]
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in replaced.stdout, replaced.stdout[-6000:]
    events = {name: stop_events(name, container, since[name]) for name, container in ray_containers.items()}
    head_stopped_at = min(e["timeNano"] for e in events["e2e-head"] if e["Action"] == "kill")
    for name, container in ray_containers.items():
        assert container_id(name, container) != before[name], f"{container} on {name} kept its old settings"
        signals = [e["Actor"]["Attributes"].get("signal") for e in events[name] if e["Action"] == "kill"]
        exits = [e["Actor"]["Attributes"].get("exitCode") for e in events[name] if e["Action"] == "die"]
        if name == "e2e-worker" and not signals:
            # upgrading.md: replacing the head ends the workers' Ray nodes; a worker whose node ended before its
            # play exited by itself (Ray's exit 1, after the head's stop) and was replaced all the same.
            died_at = [e["timeNano"] for e in events[name] if e["Action"] == "die"]
            assert exits == ["1"] and died_at[0] > head_stopped_at, (name, exits, died_at, head_stopped_at)
        else:
            assert signals == ["15"] and exits and "137" not in exits, (name, signals, exits)  # SIGTERM, no SIGKILL
        host_config = assert_hardened(name, container)  # security.md's table: each variable its flag
        assert (host_config["PidsLimit"], host_config["Memory"]) == (4000, 1500 * 2**20), (name, container)
        assert stop_timeout(name, container) == 45  # upgrading.md: above Ray's 30 s drain
    upgraded = next(upgrade)
    assert upgraded.returncode == 0 and "cluster whole: 2 Ray nodes alive (2 CPUs)" in upgraded.stdout, upgraded.stdout[
        -6000:
    ]

    # One node's Ray container stopped: status.yml fails naming that node only.
    docker("exec", "fltest-ansible-e2e-worker", "docker", "stop", "--time", "45", "fltest-ray-worker")
    broken = stages.play(lab, "status.yml", stage="status.yml (worker's Ray container stopped)")
    assert broken.returncode == 2, broken.stdout[-6000:]
    assert re.search(r"cluster not whole: e2e-worker \(fltest-ray-worker exited", broken.stdout), broken.stdout[-6000:]
    assert status_lines(broken.stdout)["e2e-head"] == "fltest-ray-head running; Ray node alive with 1 CPU"
    restored = stages.play(lab, "cluster.yml", stage="cluster.yml (restores the stopped worker)")
    assert restored.returncode == 0 and recap(restored.stdout)["e2e-worker"]["changed"] > 0, restored.stdout[-6000:]
    assert "Ray cluster ready: 2 nodes, 2 CPUs" in restored.stdout

    # A worker killed outright: Ray lists its node as alive until it misses its heartbeats (about 30 s).
    # The play starts the container again and reports the cluster ready only with the Ray node of that
    # new start (before the fix: at once, on the dead node, as the new one had not joined yet).
    killed_start = ray_node_start("e2e-worker")
    docker("exec", "fltest-ansible-e2e-worker", "docker", "kill", "fltest-ray-worker")
    revived = stages.play(
        lab, "cluster.yml", "--tags", "ray", stage="cluster.yml --tags ray (a worker killed just before)"
    )
    assert revived.returncode == 0 and "Ray cluster ready: 2 nodes, 2 CPUs" in revived.stdout, revived.stdout[-6000:]
    serving = [n["start"] for n in live_ray_nodes() if n["ip"] == NODES["e2e-worker"]]
    assert serving == [ray_node_start("e2e-worker")] and killed_start not in serving, (killed_start, serving)

    # faults.md: a node removed (teardown.yml --limit, its image too), then deleted from the inventory; added back,
    # only it changes.
    head_container = container_id("e2e-head", "fltest-ray-head")
    removed = stages.play(
        lab,
        "teardown.yml",
        "--limit",
        "e2e-worker",
        "-e",
        "fltest_teardown_images=true",
        stage="teardown.yml --limit e2e-worker (its image too)",
    )
    assert removed.returncode == 0 and set(recap(removed.stdout)) == {"e2e-worker"}, removed.stdout[-6000:]
    assert docker("exec", "fltest-ansible-e2e-worker", "docker", "ps", "--all", "--quiet").stdout.split() == []
    assert node_state("e2e-worker") == (True, False)  # Docker stays; /etc/fltest is gone
    assert image_ids("e2e-worker") == set(), "fltest_teardown_images=true left the image"
    assert container_id("e2e-head", "fltest-ray-head") == head_container and image_ids("e2e-head")
    full_inventory = (lab / "hosts.yml").read_text()
    without = yaml.safe_load(full_inventory)
    without["all"]["children"]["ray_workers"] = {"hosts": {}}
    (lab / "hosts.yml").write_text(yaml.safe_dump(without))
    alone = stages.play(lab, "cluster.yml", stage="cluster.yml (the worker deleted from the inventory)")
    assert alone.returncode == 0 and "Ray cluster ready: 1 nodes, 1 CPUs" in alone.stdout, alone.stdout[-6000:]
    assert recap(alone.stdout)["e2e-head"]["changed"] == 0, alone.stdout[-6000:]
    # Added back with upgrading.md's other distribution (the first cluster.yml checked the relay's): the
    # controller sends the worker its archive itself, and nothing goes through the relay.
    (lab / "hosts.yml").write_text(full_inventory)
    added = stages.play(
        lab,
        "cluster.yml",
        "-e",
        "fltest_images_distribution=controller",
        stage="cluster.yml (the worker added back; images from the controller)",
    )
    assert added.returncode == 0 and "Ray cluster ready: 2 nodes, 2 CPUs" in added.stdout, added.stdout[-6000:]
    rows = recap(added.stdout)
    assert rows["e2e-head"]["changed"] == 0 and rows["e2e-worker"]["changed"] > 0, added.stdout[-6000:]
    copied = task_outcomes(added.stdout, "fltest_images : Copy the archives of images whose id differs")
    assert copied.get("e2e-worker") == {"changed"} and "changed" not in copied.get("e2e-head", set()), (
        copied,
        added.stdout[-6000:],
    )
    assert task_outcomes(added.stdout, "fltest_images : Fetch the image archive from the relay") == {}
    assert image_ids("e2e-worker") == image_ids("e2e-head")


def start_run_yml(lab: Path, config: Path, results: Path) -> subprocess.Popen:
    """run.yml as a user starts it in a terminal: its own session (Ctrl-C reaches it alone), SIGINT handled."""
    return subprocess.Popen(
        playbook_command(lab, "run.yml", *run_vars(config, results)),
        cwd=checkout_of(lab) / "ansible",
        env=ansible_env(home_of(lab)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def staged_rounds(node: str, experiment_name: str) -> int:
    """Rounds the staged flwr run of ``experiment_name`` has recorded on emulated node ``node`` (0 before any)."""
    listed = docker(
        "exec",
        f"fltest-ansible-{node}",
        "sh",
        "-c",
        f"cat /var/lib/fltest/work/runs/*/results/{experiment_name}/flower/metrics.jsonl",
        check=False,
    )
    return max(len(listed.stdout.splitlines()) - 1, 0) if listed.returncode == 0 else 0


def wait_for_staged_round(process: subprocess.Popen, node: str, experiment_name: str, server_round: int) -> None:
    """Wait (up to 8 minutes: a precondition, not a bound) until the staged run has ``server_round`` rounds; fail if run.yml ends first."""
    deadline = time.monotonic() + 480
    while staged_rounds(node, experiment_name) < server_round:
        if process.poll() is not None:
            pytest.fail(
                f"run.yml ended (rc={process.returncode}) before round {server_round}: {process.stdout.read()[-4000:]}"
            )
        assert time.monotonic() < deadline, f"round {server_round} not reached in 480 s"
        time.sleep(1)


def interrupt_run_yml(
    lab: Path, config: Path, results: Path, node: str, experiment_name: str
) -> tuple[int, str, float]:
    """Ctrl-C on run.yml at round 2 of the run on ``node``: its exit code, its output, the seconds from the signal to its end."""
    process = start_run_yml(lab, config, results)
    try:
        wait_for_staged_round(process, node, experiment_name, 2)
        os.killpg(process.pid, signal.SIGINT)
        signalled = time.monotonic()
        output, _ = process.communicate(timeout=300)
        return process.returncode, output, time.monotonic() - signalled
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def runs_in_head() -> list[dict]:
    """The fltest run processes in the Ray head's container (deploy/node/runs.py)."""
    listed = docker(
        "exec",
        "fltest-ansible-e2e-head",
        "docker",
        "exec",
        "--user",
        str(KIT.uid),
        "fltest-ray-head",
        "python",
        "-m",
        "deploy.node.runs",
        "list",
    ).stdout
    return json.loads(listed.strip().splitlines()[-1])


def staged_folders() -> dict[str, list[str]]:
    """The staged runs' folders left on each emulated node."""
    return {
        name: docker("exec", f"fltest-ansible-{name}", "ls", "/var/lib/fltest/work/runs", check=False).stdout.split()
        for name in NODES
    }


def image_ids(node: str) -> set[str]:
    """The ids of the FLTest image under test on emulated node ``node`` (empty once it was removed)."""
    listed = docker("exec", f"fltest-ansible-{node}", "docker", "images", "--quiet", TEST_IMAGE, check=False)
    return set(listed.stdout.split())


def container_id(node: str, container: str) -> str:
    """The id of ``container`` on emulated node ``node`` (a new one once it was replaced)."""
    return docker(
        "exec", f"fltest-ansible-{node}", "docker", "inspect", "--format", "{{.Id}}", container
    ).stdout.strip()


def ray_node_start(node: str) -> str:
    """The start id the Ray container on emulated node ``node`` labelled its Ray node with (deploy/kit.env)."""
    container = "fltest-ray-head" if node == "e2e-head" else "fltest-ray-worker"
    return docker(
        "exec", f"fltest-ansible-{node}", "docker", "exec", container, "cat", KIT.ray_node_start_file
    ).stdout.strip()


def live_ray_nodes() -> list[dict]:
    """Ray's live nodes as deploy.node.list_ray_nodes lists them, asked in the head's container."""
    address = f"{NODES['e2e-head']}:{KIT.ray_gcs_port}"
    listed = docker(
        "exec",
        "fltest-ansible-e2e-head",
        "docker",
        "exec",
        "fltest-ray-head",
        "python",
        "-m",
        "deploy.node.list_ray_nodes",
        address,
    ).stdout
    return json.loads(listed.strip().splitlines()[-1])


def flower_experiment(folder: Path, superlink: str, ca: Path | str, rounds: int = 2) -> Path:
    folder.mkdir()
    config = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    config.pop("hooks")
    config.update(name="ansible-flower", clients=len(NODES))
    config["training"].update(rounds=rounds, local_epochs=1, round_timeout_s=60)
    config["output"] = {"save_round_models": True}
    options = {"mode": "deployment", "superlink": superlink, "root_certificates": str(ca)}
    config["runs"] = [
        {"name": "reference", "framework": "reference"},
        {"name": "flower", "framework": "flwr", "options": options},
    ]
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def superlink_flwr(*args: str) -> subprocess.CompletedProcess:
    """The operator's ``flwr <args> --format json`` in the SuperLink's container on the head node (its Control API
    answers only there)."""
    return docker(
        "exec",
        "fltest-ansible-e2e-head",
        "docker",
        "exec",
        "fltest-superlink",
        "python",
        "-m",
        "deploy.node.superlink_flwr",
        *args,
        "--format",
        "json",
        check=False,
    )


def online_supernodes() -> list[dict]:
    """The SuperNodes the SuperLink lists."""
    listed = superlink_flwr("supernode", "list", "fltest")
    return json.loads(listed.stdout).get("nodes", []) if listed.stdout.strip().startswith("{") else []


def online_ids() -> set[str]:
    """The node ids the SuperLink lists online."""
    return {n["node-id"] for n in online_supernodes() if n.get("status") == "online"}


def node_probe(node: str, requests: list, user: str = "root") -> dict:
    """tests/control_probe.py's PROBE of ``requests`` run on emulated node ``node`` as ``user`` (its own python3)."""
    result = docker(
        "exec", "--user", user, f"fltest-ansible-{node}", "python3", "-c", PROBE, json.dumps(requests), check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def flower_run_status(run_id: str) -> str:
    """Flower run ``run_id``'s status as the SuperLink lists it (or why it could not)."""
    listed = superlink_flwr("ls", "fltest", "--run-id", run_id)
    return json.loads(listed.stdout)["runs"][0]["status"] if listed.stdout.strip().startswith("{") else listed.stderr


def flower_app_through_flwr_yml(lab: Path, stages: Stages) -> str:
    """own-flower-app.md's lab block with the tests' own Flower App in ``~/my-app``: submitted (its run id printed),
    followed to its end with ``flwr log`` (the page's next sentence), listed, its files (the ServerApp's
    final_model.npz, each ClientApp's file, written in their working folders) copied to the controller; and what
    flwr.yml refuses. Returns the App's run id."""
    head, worker = NODES
    shutil.copytree(APP, home_of(lab) / "my-app")
    # The App's git history, which flwr.yml leaves out (own-flower-app.md): Flower would pack it (its FAB keeps .git but
    # drops .venv and __pycache__), and 24 MB of it make a FAB over Flower's 10 MB, which flwr run refuses.
    (home_of(lab) / "my-app" / ".git").mkdir()
    (home_of(lab) / "my-app" / ".git" / "notes.md").write_text(secrets.token_hex(12 * 1024 * 1024))
    streamed = stages.play(
        lab,
        "flwr.yml",
        "-e",
        '{"fltest_flwr_args": ["run", ".", "fltest", "--stream"]}',
        stage="flwr.yml: run --stream",
    )
    assert streamed.returncode == 2 and "flwr.yml: fltest_flwr_args: flwr run --stream: " in streamed.stdout, (
        streamed.stdout[-4000:]
    )
    steps = page_steps(lab, stages, "own-flower-app/lab")
    submitted = next(steps)
    assert submitted.returncode == 0, submitted.stdout[-6000:] + submitted.stderr[-3000:]
    run_id = re.search(r"Successfully started run (\d+)", submitted.stdout).group(1)
    followed = stages.play(
        lab,
        "flwr.yml",
        "-e",
        json.dumps({"fltest_flwr_args": ["log", run_id, "fltest"]}),
        stage="flwr.yml: flwr log until the App's run ends",
    )
    assert followed.returncode == 0, followed.stdout[-6000:]
    assert "tiny-app: 2 rounds on 2 SuperNodes, model saved to final_model.npz" in followed.stdout, followed.stdout[
        -6000:
    ]
    assert flower_run_status(run_id) == "finished:completed"
    listed = next(steps)
    assert listed.returncode == 0 and re.search(rf"{run_id}.*finished:completed", listed.stdout), listed.stdout[-4000:]
    fetched = next(steps)
    assert fetched.returncode == 0, fetched.stdout[-6000:]
    files = checkout_of(lab) / "ansible" / "app-files"  # the page's $PWD/app-files
    model = np.load(files / head / "superlink" / "final_model.npz")
    assert [array.tolist() for array in model.values()] == [
        [3.0, 3.0, 3.0]
    ]  # 2 rounds of the mean of (partition id + 1)
    assert (
        files / head / "supernode" / "client-0.txt"
    ).read_text() == "round 1\nround 2\n"  # read data-path's partition 0
    assert (files / worker / "supernode" / "client-1.txt").read_text() == "round 1\nround 2\n"
    assert owners(files) == {os.getuid()}
    failed = stages.play(lab, "flwr.yml", "-e", "fltest_flwr_args='stop 1 fltest'", stage="flwr.yml: stop of no run")
    assert failed.returncode == 2, failed.stdout[-4000:]
    assert re.search(r"flwr stop exited [1-9]\d* on e2e-head \(see its output above\): \S", failed.stdout), (
        failed.stdout[-4000:]
    )
    return run_id


def test_flower_experiment_on_supernodes(lab, stages):
    """The SuperLink on the head node, a SuperNode on each node: keys made on the nodes, registered,
    online; run.yml ships each node its partition and the Flower run matches the reference."""
    inventory = yaml.safe_load((lab / "hosts.yml").read_text())
    head, worker = NODES
    inventory["all"]["children"].update(
        superlink={"hosts": {head: {}}},
        supernodes={"hosts": {head: {"supernode_partition_id": 0}, worker: {"supernode_partition_id": 1}}},
    )
    (lab / "hosts.yml").write_text(yaml.safe_dump(inventory))
    first = stages.play(lab, "cluster.yml", stage="cluster.yml with Flower, first run")
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    controller = controller_dir(lab)
    assert not any(p.name == "id_ecdsa" for p in controller.rglob("*")), "a private key reached the controller"
    for name in NODES:
        assert (controller / "flower" / "supernodes" / f"{name}.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
        mode = docker(
            "exec", f"fltest-ansible-{name}", "stat", "-c", "%a %u", "/etc/fltest/flower/supernode/id_ecdsa"
        ).stdout.split()
        assert mode == ["600", "10001"]
        mounts = json.loads(
            docker(
                "exec",
                f"fltest-ansible-{name}",
                "docker",
                "inspect",
                "--format",
                "{{json .Mounts}}",
                "fltest-supernode",
            ).stdout
        )
        assert {m["Destination"]: m["RW"] for m in mounts} == {
            "/run/secrets/supernode": False,
            "/run/secrets/tls/ca.crt": False,
            "/var/lib/fltest/partitions": False,
            KIT.app_files_dir: True,
        }
    deadline, nodes = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        nodes = online_supernodes()
        if len(nodes) == len(NODES) and all(n.get("status") == "online" for n in nodes):
            break
        time.sleep(2)
    assert [n["status"] for n in nodes] == ["online"] * len(NODES), nodes
    again = stages.play(lab, "cluster.yml", stage="cluster.yml with Flower, second run")
    assert again.returncode == 0 and all(r["changed"] == 0 for r in recap(again.stdout).values()), again.stdout[-6000:]

    status = stages.play(lab, "status.yml", stage="status.yml (Ray and Flower)")
    assert status.returncode == 0 and all(r["changed"] == 0 for r in recap(status.stdout).values()), status.stdout[
        -6000:
    ]
    node_ids = {name: (controller / "flower" / "supernodes" / f"{name}.node-id").read_text().strip() for name in NODES}
    assert sorted(node_ids.values()) == sorted(n["node-id"] for n in nodes)
    assert status_lines(status.stdout) == {
        head: "fltest-fleet-proxy running; fltest-ray-head running; fltest-superlink running; fltest-superlink-net running; "
        f"fltest-supernode running; Ray node alive with 1 CPU; SuperLink /health 200; SuperNode {node_ids[head]} online",
        worker: f"fltest-ray-worker running; fltest-supernode running; Ray node alive with 1 CPU; SuperNode {node_ids[worker]} online",
    }, status.stdout[-6000:]
    assert "cluster whole: 2 Ray nodes alive (2 CPUs), SuperLink healthy, 2 SuperNodes online" in status.stdout

    # Only the operator reaches the SuperLink's Control API: from the controller, from a SuperNode's node and
    # as another user on the SuperLink's own node, every Control call is refused (the proxy's 403 or no
    # listener), while /health and a Fleet call get through the proxy on the SuperNodes' address.
    holder_ip = docker(
        "exec",
        f"fltest-ansible-{head}",
        "docker",
        "inspect",
        "--format",
        "{{.NetworkSettings.IPAddress}}",
        "fltest-superlink-net",
    ).stdout.strip()
    control, health, fleet = probes([NODES[head]])  # the SuperNodes' address, and 9443 there
    on_node = probes([holder_ip, "127.0.0.1"])[0]  # on the SuperLink's node: its namespace's address, loopback
    from_controller = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(control + health + fleet)], capture_output=True, text=True
    )
    assert from_controller.returncode == 0, from_controller.stderr
    check_refusals(json.loads(from_controller.stdout), control, health, fleet)
    check_refusals(node_probe(worker, control + health + fleet), control, health, fleet)
    check_refusals(
        node_probe(head, control + on_node + health + fleet, user="nobody"), control + on_node, health, fleet
    )
    published = docker("exec", f"fltest-ansible-{head}", "docker", "port", "fltest-superlink-net").stdout.split()
    assert published == ["8000/tcp", "->", f"{NODES[head]}:8000"], published  # the proxy only, on the cluster IP only
    stages.report(
        f"Control API refused: {len(control)} probes from the controller and a SuperNode's node, {len(control + on_node)} as nobody on the SuperLink's"
    )

    # A config that names the SuperNodes' address as its SuperLink is refused before anything is shipped.
    wrong = flower_experiment(lab / "wrong-address", f"{NODES[head]}:8000", controller / "flower" / "tls" / "ca.crt")
    refused_address = run_yml(lab, wrong, lab / "wrong-results")
    assert (
        refused_address.returncode == 2
        and "options.superlink of a deployment run must be 127.0.0.1:9443" in refused_address.stdout
    ), refused_address.stdout[-4000:]
    assert not (lab / "wrong-results").exists()

    config = flower_experiment(lab / "flower-experiment", "127.0.0.1:9443", controller / "flower" / "tls" / "ca.crt")
    results = lab / "flower-results"
    run = stages.play(
        lab,
        "run.yml",
        *run_vars(config, results),
        stage="run.yml (Flower deployment)",
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    left = docker(
        "exec", f"fltest-ansible-{head}", "docker", "ps", "--all", "--quiet", "--filter", "name=fltest-operator"
    ).stdout.split()
    assert left == [], "the operator container outlived its run"
    experiment_dir = results / "ansible-flower"
    summary = json.loads((experiment_dir / "flower" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2, summary
    assert sorted(summary["client_hosts"]) == sorted(NODES)  # each partition trained on its own node
    assert_conforms(experiment_dir, "flower", 2)
    assert owners(results) == {os.getuid()}
    for name in NODES:
        link = docker(
            "exec", f"fltest-ansible-{name}", "readlink", "/var/lib/fltest/flower/partitions/current"
        ).stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{8,}", link), (name, link)

    app_run_id = flower_app_through_flwr_yml(lab, stages)

    head_containers = (
        "fltest-ray-head",
        "fltest-superlink-net",
        "fltest-superlink",
        "fltest-fleet-proxy",
        "fltest-supernode",
    )
    for name, containers in ((head, head_containers), (worker, ("fltest-ray-worker", "fltest-supernode"))):
        for container in containers:
            assert_hardened(name, container)
    for container in ("fltest-superlink", "fltest-supernode"):  # upgrading.md: stopped with 20 s to close connections
        assert stop_timeout(head, container) == 20, container

    # Ctrl-C on run.yml while fltest runs next to the SuperLink: the operator container gets SIGINT, its fltest stops
    # the Flower run on the SuperLink and records the rounds so far; they reach the controller; exit 130.
    long_flower = flower_experiment(
        lab / "flower-interrupted", "127.0.0.1:9443", controller / "flower" / "tls" / "ca.crt", rounds=300
    )
    stopped_results = lab / "flower-interrupted-results"
    code, output, seconds = interrupt_run_yml(lab, long_flower, stopped_results, head, "ansible-flower")
    stages.done("run.yml (Flower deployment) interrupted by Ctrl-C at round 2", f"rc={code}", seconds)
    assert code == 130, output[-6000:]
    assert output.strip().splitlines()[-1] == (
        f"ansible-playbook: interrupted (SIGINT): stopped fltest run on {head} (it exited 130);"
        f" its rounds so far and summary: {stopped_results}/ansible-flower"
    ), output[-6000:]
    summary = json.loads((stopped_results / "ansible-flower" / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["rounds_completed"] < 300, summary
    assert flower_run_status(str(summary["flower_run_id"])) == "finished:stopped"
    assert (
        docker(
            "exec", f"fltest-ansible-{head}", "docker", "ps", "--all", "--quiet", "--filter", "name=fltest-operator"
        ).stdout.split()
        == []
    )
    assert staged_folders()[head] == []

    # The SuperLink restarted (docker restart, as the playbook's handler does): its state is on a volume,
    # so the SuperNodes come back online by themselves, and the next run completes without cluster.yml.
    docker("exec", f"fltest-ansible-{head}", "docker", "restart", "fltest-superlink")
    start = time.monotonic()
    while time.monotonic() < start + 180 and not online_ids() >= set(node_ids.values()):
        time.sleep(2)
    back = time.monotonic() - start
    stages.done("SuperLink restarted: SuperNodes back online", f"{sorted(online_ids())}", back)
    assert online_ids() >= set(node_ids.values()), online_supernodes()
    # The CA as the README writes it, under ~: the controller's home for the check, the container's for the run.
    tilde = flower_experiment(lab / "flower-tilde", "127.0.0.1:9443", f"~/.fltest/{lab.name}/flower/tls/ca.crt")
    rerun = run_yml(lab, tilde, results)
    assert rerun.returncode == 0, rerun.stdout[-8000:]
    assert recap(rerun.stdout)[worker]["changed"] == 0, rerun.stdout[-6000:]  # its partition is already there

    mixed = yaml.safe_load(config.read_text())
    mixed["runs"].append({"name": "simulation", "framework": "flwr"})
    config.write_text(yaml.safe_dump(mixed))
    refused = run_yml(lab, config, results)
    assert refused.returncode != 0 and "split them into two configs" in refused.stdout, refused.stdout[-4000:]

    # A SuperNode stopped: status.yml fails with one line naming its host.
    docker("exec", f"fltest-ansible-{worker}", "docker", "stop", "--time", "20", "fltest-supernode")
    broken = stages.play(lab, "status.yml", stage="status.yml (worker's SuperNode stopped)")
    assert broken.returncode == 2, broken.stdout[-6000:]
    assert re.search(r"cluster not whole: e2e-worker \(fltest-supernode exited", broken.stdout), broken.stdout[-6000:]
    assert f'"Flower run {app_run_id} finished:completed fltest-tests/tiny-app"' in broken.stdout, broken.stdout[
        -6000:
    ]  # a user's App's run

    # The SuperLink lost its registrations (container and state volume removed): cluster.yml sees it from the
    # SuperLink's own list, registers the keys again, starts what is stopped and waits until every SuperNode is online.
    docker("exec", f"fltest-ansible-{head}", "docker", "rm", "--force", "fltest-superlink")
    docker("exec", f"fltest-ansible-{head}", "docker", "volume", "rm", "fltest-superlink-state")
    repaired = stages.play(lab, "cluster.yml", stage="cluster.yml (SuperLink state lost, a SuperNode stopped)")
    assert repaired.returncode == 0, repaired.stdout[-6000:]
    outcomes = task_outcomes(repaired.stdout, "fltest_supernode : Register the public key with the SuperLink")
    assert {host.split(" -> ")[0]: outcome for host, outcome in outcomes.items()} == {
        head: {"changed"},
        worker: {"changed"},
    }, (outcomes, repaired.stdout[-6000:])
    assert "SuperNodes online: e2e-head node " in repaired.stdout, repaired.stdout[-6000:]
    # The stopped SuperNode is replaced, not reported as a running container stopped for new settings.
    stopped = task_outcomes(
        repaired.stdout, "fltest_container : Stop the running container whose settings changed, gracefully"
    )
    replaced = task_outcomes(
        repaired.stdout,
        "fltest_container : Remove the container to replace (its settings changed, or it is not running)",
    )
    assert stopped.get(worker) == {"skipping"} and "changed" in replaced.get(worker, set()), repaired.stdout[-6000:]
    new_ids = {name: (controller / "flower" / "supernodes" / f"{name}.node-id").read_text().strip() for name in NODES}
    assert online_ids() >= set(new_ids.values()), online_supernodes()
    settled = stages.play(lab, "cluster.yml", stage="cluster.yml (after the repair)")
    assert settled.returncode == 0 and all(r["changed"] == 0 for r in recap(settled.stdout).values()), settled.stdout[
        -6000:
    ]

    # faults.md: a SuperNode's node removed (teardown.yml --limit): its key stays registered until `flwr supernode
    # unregister`, so the SuperLink still lists its node id, no longer online.
    removed = stages.play(lab, "teardown.yml", "--limit", worker, stage="teardown.yml --limit e2e-worker (SuperNode)")
    assert removed.returncode == 0 and set(recap(removed.stdout)) == {worker}, removed.stdout[-6000:]
    listed = {n["node-id"]: n.get("status") for n in online_supernodes()}
    assert new_ids[worker] in listed and listed[new_ids[worker]] != "unregistered", listed
    assert new_ids[head] in online_ids(), listed  # the head's SuperNode untouched

    # first-lab.md's teardown block removes every container, the SuperLink's state volume and the node folders;
    # the images stay, and so does the controller's ~/.fltest/<inventory>/; a second run finds nothing left to remove.
    (down,) = page_steps(lab, stages, "first-lab/teardown", folder="ansible")
    assert down.returncode == 0 and recap(down.stdout)[head]["changed"] > 0, down.stdout[-6000:]
    for name in NODES:
        assert docker("exec", f"fltest-ansible-{name}", "docker", "ps", "--all", "--quiet").stdout.split() == [], name
        assert node_state(name) == (True, False), name  # Docker stays; /etc/fltest (token, TLS, keys) is gone
        assert image_ids(name), f"the teardown removed the image on {name}"
        for folder in ("/var/lib/fltest/work", "/var/lib/fltest/flower", "/var/cache/fltest/images"):
            assert docker("exec", f"fltest-ansible-{name}", "test", "-e", folder, check=False).returncode == 1, folder
    assert (controller / "ray_token").is_file() and (controller / "flower" / "tls" / "ca.crt").is_file()
    for name in NODES:  # the SuperLink's state and App files volumes, each SuperNode's App files volume
        assert (
            docker(
                "exec", f"fltest-ansible-{name}", "docker", "volume", "ls", "--quiet", "--filter", "name=fltest-"
            ).stdout.split()
            == []
        )
    again = stages.play(lab, "teardown.yml", stage="teardown.yml again")
    assert again.returncode == 0 and set(recap(again.stdout)) >= set(NODES), again.stdout[-6000:]
    assert all(row["changed"] == 0 for row in recap(again.stdout).values()), again.stdout[-6000:]


def test_gpus_on_lab_nodes(lab, stages):
    """After the teardown above (Docker and the image stay): the worker declared with one GPU, the head with auto.
    cluster.yml --check reports the NVIDIA Container Toolkit it would install and changes nothing; then, with Ray's
    logical GPUs (fltest_gpu_devices none; no GPU here), the worker's Ray node has the GPU and its container no device,
    the head's auto finds no nvidia-smi and says so; the worker's image, removed, comes back from the head (the relay)."""
    inventory = yaml.safe_load((lab / "hosts.yml").read_text())
    children = inventory["all"]["children"]
    for group in ("superlink", "supernodes"):  # the Ray cluster only: the Flower test above brought its own
        children.pop(group, None)
    head, worker = NODES
    children["ray_head"]["hosts"][head]["fltest_gpus"] = "auto"
    children["ray_workers"]["hosts"][worker]["fltest_gpus"] = 1
    (lab / "hosts.yml").write_text(yaml.safe_dump(inventory))

    check = stages.play(
        lab,
        "cluster.yml",
        "--check",
        "--tags",
        "gpu",
        "-e",  # gpus.md: a lab's mirror and a pinned version
        json.dumps(
            {
                "fltest_gpu_toolkit_repo_url": "http://mirror.lab.example/nvidia/deb",
                "fltest_gpu_toolkit_packages": ["nvidia-container-toolkit=1.17.8-1"],
            }
        ),
        stage="cluster.yml --check --tags gpu (a node declared with a GPU)",
    )
    assert check.returncode == 0, check.stdout[-6000:]
    reported = task_outcomes(check.stdout, "fltest_gpu : Report the toolkit steps that --check skips")
    assert reported == {head: {"skipping"}, worker: {"changed"}}, (reported, check.stdout[-6000:])
    assert (
        "--check: would install nvidia-container-toolkit=1.17.8-1 from http://mirror.lab.example/nvidia/deb, register "
        "Docker's nvidia runtime (nvidia-ctk), restart Docker and check that a container sees 1 GPU" in check.stdout
    ), check.stdout[-6000:]
    assert (
        docker(
            "exec",
            f"fltest-ansible-{worker}",
            "test",
            "-e",
            "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
            check=False,
        ).returncode
        == 1
    )
    assert "fltest_gpus auto: no nvidia-smi on the node: 0 GPUs" in check.stdout

    docker("exec", f"fltest-ansible-{worker}", "docker", "image", "rm", TEST_IMAGE)  # nothing runs after the teardown
    up = stages.play(
        lab,
        "cluster.yml",
        "-e",
        "fltest_gpu_devices=none",
        stage="cluster.yml (logical GPUs; the worker's image relayed)",
    )
    assert up.returncode == 0, up.stdout[-6000:] + up.stderr[-3000:]
    assert "Ray cluster ready: 2 nodes, 2 CPUs, 1 GPU" in up.stdout, up.stdout[-6000:]
    # The teardown took the token too: its copy notifies the restart, which a container started by
    # this play skips (it mounts the new token; a second start seconds after the first once left the
    # worker out of the cluster).
    restarted = task_outcomes(up.stdout, "fltest_ray : Restart ray containers")
    assert restarted and all(outcomes == {"skipping"} for outcomes in restarted.values()), (
        restarted,
        up.stdout[-6000:],
    )
    fetched = task_outcomes(up.stdout, "fltest_images : Fetch the image archive from the relay")
    assert fetched == {head: {"skipping"}, worker: {"changed"}}, (fetched, up.stdout[-6000:])
    saved = task_outcomes(
        up.stdout, "fltest_images : Save an image the relay has already (no copy through the controller's uplink)"
    )
    assert saved == {head: {"changed"}}, (
        saved,
        up.stdout[-6000:],
    )  # the teardown removed the head's archives: saved there
    host_config = assert_hardened(worker, "fltest-ray-worker")  # a GPU node keeps the hardening
    assert not host_config.get("DeviceRequests"), host_config.get(
        "DeviceRequests"
    )  # logical: no device asked of Docker
    command = json.loads(
        docker(
            "exec",
            f"fltest-ansible-{worker}",
            "docker",
            "inspect",
            "--format",
            "{{json .Config.Cmd}}",
            "fltest-ray-worker",
        ).stdout
    )
    assert "--num-gpus=1" in command, command

    status = stages.play(lab, "status.yml", stage="status.yml (a node with a GPU)")
    assert status.returncode == 0, status.stdout[-6000:]
    assert status_lines(status.stdout) == {
        head: "fltest-ray-head running; Ray node alive with 1 CPU, 0 GPUs; fltest_gpus auto: no nvidia-smi on the node: 0 GPUs",
        worker: "fltest-ray-worker running; Ray node alive with 1 CPU, 1 GPU",
    }, status.stdout[-6000:]
    assert "cluster whole: 2 Ray nodes alive (2 CPUs, 1 GPU)" in status.stdout
