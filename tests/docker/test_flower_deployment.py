"""A real Flower deployment in containers: a TLS SuperLink with SuperNode authentication, 2 SuperNodes.

The SuperNodes each hold their own ECDSA P-384 key and their own partition; ``fltest-flower run``
submits fltest's Flower App with ``flwr run`` from the SuperLink's own network namespace and the
run must match the reference backend; ``fltest-flower flwr run . fltest`` submits a Flower App of
the user's own (tests/flower_app), whose files come back with ``fltest-flower files``. Nobody else
reaches the Control API: not a local user (through any address of the project's containers), not a
SuperNode; every container is hardened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.flower_emulation.federation import OPERATOR_TIMEOUT_S, FlowerFederation, supernode_name
from deploy.flower_emulation.runs import (
    COMPOSE_END_WAIT_S,
    ONLINE_WAIT_S,
    SUPERNODE_RESTART_TIMEOUT_S,
    unfinished_flower_runs,
)
from deploy.images import IMAGE
from deploy.kit import KIT
from deploy.node.runs import STOP_TIMEOUT_S
from deploy.pki.supernode_keys import PRIVATE_NAME, check_unique, ensure_key
from fltest.backends.flwr_deployment.connection import CONNECTION
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError
from fltest.params import load_params
from fltest.results.files import read_jsonl
from tests.conformance import assert_conforms
from tests.conftest import REPO, base_config
from tests.control_probe import PROBE, check_refusals, probes
from tests.doc_blocks import doc_block, run_block
from tests.docker.hardening import assert_no_capability_inside, assert_root_read_only
from tests.docker.streams import find_in_stream, private_key_markers
from tests.test_model_module import MODEL

pytestmark = pytest.mark.docker

PROJECT = "fltest-flower-test"  # not the default project: a user's own federation is left alone
NODES = [supernode_name(0), supernode_name(1)]
ROGUE = supernode_name(2)  # has a key pair, never registered
ROUNDS = 3
TIMEOUT_S = 120
UP_TIMEOUT_S = 3 * TIMEOUT_S + 120  # fltest-flower up: its two waits (--timeout, 120 s each) and the registrations
REFUSED_EXIT = 1  # a SuperNode the SuperLink refuses: Flower logs its exit code 305 and the process exits 1 (flwr_exit)
RUN_TIMEOUT_S = 300  # a whole 3-round run, with room for a loaded host (measured 65-145 s)
SETUP_BOUND_S = (
    120  # the operator container's and fltest's start-up, the shards, one question to the SuperLink (50 s at load 15)
)
HEARTBEAT_S = (
    60  # a SuperNode is declared gone 2 heartbeat intervals (2 x 30 s, Flower's fixed interval) after its last one
)
APP = (
    REPO / "tests" / "flower_app"
)  # the tests' own Flower App: 2 rounds, final_model.npz, a client-<id>.txt per SuperNode
# fltest-flower run's Ctrl-C, as its deadlines bound it (deploy/flower_emulation/run_in_namespace.py): the operator's
# stop, compose's end, the Flower run's status and its flwr stop, the SuperNodes' restart, their wait until online (its
# last poll a flwr command of its own).
INTERRUPT_BOUND_S = (
    STOP_TIMEOUT_S + COMPOSE_END_WAIT_S + 3 * OPERATOR_TIMEOUT_S + SUPERNODE_RESTART_TIMEOUT_S + ONLINE_WAIT_S
)
LONG_RUN = "num-server-rounds=100 train-seconds=1.0"  # the App's run config for a run that outlasts a test step


def _config(federation: FlowerFederation, ca: Path) -> ExperimentConfig:
    """Digits on 2 clients, a reference run and a Flower deployment run."""
    config = base_config()
    config.pop("hooks")
    config.update(name="flower-deployment", clients=len(NODES))
    config["training"].update(rounds=ROUNDS, local_epochs=1, round_timeout_s=60)
    config["output"] = {"save_round_models": True}
    options = {"mode": "deployment", "superlink": federation.address, "root_certificates": str(ca)}
    config["runs"] = [
        {"name": "reference", "framework": "reference"},
        {"name": "flower", "framework": "flwr", "options": options},
    ]
    return ExperimentConfig.model_validate(config)


@pytest.fixture(scope="module")
def federation(docker_client, fltest_image, tier_report, tmp_path_factory):
    """SuperLink + 2 registered SuperNodes with their partitions, made as the README does it (``fltest-flower tls``,
    ``keys``, ``prepare <config>``, ``up``); the rogue node has a key pair and data, never registered. Everything of
    the project is removed after."""
    root = tmp_path_factory.mktemp("flower")
    federation = FlowerFederation(
        name=PROJECT,
        generated_dir=root / "generated",
        overrides={
            "FLTEST_IMAGE": IMAGE,
            "FLOWER_SUPERNODES": str(len(NODES)),
            "FLOWER_TLS_DIR": str(root / "tls"),
            "FLOWER_KEYS_DIR": str(root / "keys"),
            "FLOWER_DATA_DIR": str(root / "data"),
        },
        client=docker_client,
    )
    federation.down()  # a run killed earlier may have left it behind
    start = time.monotonic()
    try:
        tls = _flower_cli(federation, "tls")
        assert tls.returncode == 0, tls.stderr
        ca = Path(tls.stdout.strip().rsplit(": ", 1)[1])  # root certificate for SuperNodes and the flwr CLI: <file>
        keys = _flower_cli(federation, "--supernodes", str(len(NODES) + 1), "keys")  # the rogue is supernode-2
        assert keys.returncode == 0, keys.stderr
        config = _config(federation, ca)
        experiment = root / "experiment.yaml"
        experiment.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        prepared = _flower_cli(federation, "prepare", str(experiment))
        assert prepared.returncode == 0, prepared.stderr
        shutil.copytree(
            root / "data" / NODES[0], root / "data" / ROGUE
        )  # the rogue node has data, not a registered key
        up = _flower_cli(federation, "up", timeout=UP_TIMEOUT_S)
        assert up.returncode == 0, up.stderr
        tier_report(
            f"flower: fltest-flower tls, keys, prepare, up: SuperLink + {len(NODES)} SuperNodes online ({time.monotonic() - start:.1f} s)"
        )
        yield federation, config, root
    finally:
        start = time.monotonic()
        federation.down()
        tier_report(f"flower: removed ({time.monotonic() - start:.1f} s)")
        shutil.rmtree(root / "keys")  # no private key outlives the test
        assert federation.leftovers(docker_client) == []


def _container(federation, client, service, include_stopped=False):
    found = federation.containers(client, service, include_stopped)
    assert found, f"no container of service {service}"
    return found[0]


def test_supernodes_run_as_non_root_with_their_own_read_only_key(federation, docker_client):
    federation, _, root = federation
    for node in NODES:
        container = _container(federation, docker_client, node)
        assert container.attrs["Config"]["User"] == "10001:10001"
        assert container.exec_run(["id", "-u"]).output.decode().strip() == "10001"
        mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
        key_mount = mounts["/run/secrets/supernode"]
        assert key_mount["RW"] is False and Path(key_mount["Source"]) == root / "keys" / node
        assert mounts["/var/lib/fltest/partition"]["RW"] is False
        listing = container.exec_run(["ls", "/run/secrets/supernode"]).output.decode().split()
        assert listing == [PRIVATE_NAME, f"{PRIVATE_NAME}.pub"]  # its own key only
        write = container.exec_run(["touch", "/run/secrets/supernode/x"])
        assert write.exit_code != 0
        assert stat.S_IMODE((root / "keys" / node / PRIVATE_NAME).stat().st_mode) == 0o600


def test_partitions_are_readable_by_their_owner_and_the_container_user_only(federation, docker_client):
    federation, _, root = federation
    data = root / "data"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    owner = (10001, 10001) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    for node in NODES:
        for path in [data / node, *(data / node).rglob("*")]:
            mode = path.stat()
            assert stat.S_IMODE(mode.st_mode) == (0o750 if path.is_dir() else 0o640), path
            assert (
                mode.st_uid,
                mode.st_gid,
            ) == owner  # as root: the container user's; else the owner's, which the node joins
        container = _container(federation, docker_client, node)
        assert container.exec_run(["cat", "/var/lib/fltest/partition/partition.json"]).exit_code == 0


def test_one_key_for_two_supernodes_is_refused(federation):
    federation, _, root = federation
    shutil.copytree(root / "keys" / NODES[0], root / "keys" / "copied")
    try:
        with pytest.raises(InputError, match="same key as SuperNode supernode-0"):
            check_unique(root / "keys", [NODES[0], "copied"])
        register = _flower_cli(federation, "register", "copied")
        assert (register.returncode, register.stdout) == (1, ""), register.stderr
        (line,) = register.stderr.splitlines()
        assert line.startswith("fltest-flower: error: ") and "Public key already in use" in line, line
    finally:
        shutil.rmtree(root / "keys" / "copied")
    assert ensure_key(root / "keys", NODES[0])[1] is False  # an existing key is never overwritten


def test_unregistered_key_is_refused(federation, docker_client, tier_report):
    federation, _, _ = federation
    federation.write_supernodes(
        {**{node: i for i, node in enumerate(NODES)}, ROGUE: 0}, len(NODES)
    )  # up wrote the registered ones
    federation.up(ROGUE)
    rogue = _container(federation, docker_client, ROGUE, include_stopped=True)
    # Its next exit: a container not started yet ("created") would pass a plain wait at once, with code 0;
    # a refused SuperNode exits again on every restart (restart: unless-stopped), so one always comes.
    # One CI run (load about 8, three tiers at once) saw an exit 0 first, which a SuperNode gives only on a
    # signal (Flower's graceful exit codes) and which is not explained: any such exit is reported, and the
    # refusal must still come within the time.
    deadline, other_exits = time.monotonic() + TIMEOUT_S, []
    while (code := rogue.wait(timeout=max(deadline - time.monotonic(), 1), condition="next-exit")["StatusCode"]) != (
        REFUSED_EXIT
    ):
        other_exits.append((code, rogue.logs(tail=5).decode()))
        tier_report(f"flower: the unregistered SuperNode exited {code} before its refusal: {other_exits[-1][1]!r}")
        assert time.monotonic() < deadline, other_exits  # no refusal in time
    rogue.stop(timeout=10)  # else it starts again and again, a Python start every few seconds, until the module ends
    logs = rogue.logs().decode()
    assert "Exit Code: 305" in logs and "Failed to activate SuperNode" in logs, logs[-2000:]
    superlink_log = _container(federation, docker_client, "superlink").logs().decode()
    assert "No SuperNode found with the given public key" in superlink_log
    status = {int(n["node-id"]): n["status"] for n in federation.registered()}
    assert sorted(status.values()) == ["online", "online"]  # the rogue never got a node id


def test_no_local_user_and_no_supernode_reaches_the_control_api(federation, docker_client, tier_report):
    """As user nobody on the host, to every address of the project's containers, and from a SuperNode: Control refused.

    /health and the Fleet API answer through the proxy; nothing of the project is published on the host.
    """
    federation, _, _ = federation
    containers = federation.containers(docker_client)
    assert all(
        not c.attrs["NetworkSettings"]["Ports"] or not any(c.attrs["NetworkSettings"]["Ports"].values())
        for c in containers
    ), "a port is published on the host"
    addresses = sorted(
        {n["IPAddress"] for c in containers for n in c.attrs["NetworkSettings"]["Networks"].values() if n["IPAddress"]}
    )
    holder = _container(federation, docker_client, "superlink-net").attrs["NetworkSettings"]["Networks"].values()
    control, health, fleet = probes(
        [n["IPAddress"] for n in holder]
    )  # the SuperLink's namespace: the proxy answers there
    control += [
        probe for probe in probes(addresses)[0] if probe not in control
    ]  # every other container: nothing listens
    python = shutil.which("python3", path="/usr/bin:/bin")  # the system's, which user nobody may run
    assert python, "no /usr/bin/python3 for user nobody"
    as_nobody = subprocess.run(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            python,
            "-c",
            PROBE,
            json.dumps(control + health + fleet),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert as_nobody.returncode == 0, as_nobody.stderr
    check_refusals(json.loads(as_nobody.stdout), control, health, fleet)
    control, health, fleet = probes(["superlink"])
    probe = _container(federation, docker_client, NODES[0]).exec_run(
        ["python", "-c", PROBE, json.dumps(control + health + fleet)]
    )
    assert probe.exit_code == 0, probe.output
    check_refusals(json.loads(probe.output), control, health, fleet)
    tier_report(f"flower: Control refused to user nobody at {len(addresses)} addresses and from a SuperNode")


def _memory_bytes(value: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(value[:-1]) * units[value[-1].lower()] if value[-1].lower() in units else int(value)


def test_every_container_is_hardened(federation, docker_client):
    """No capabilities, no-new-privileges, a read-only root, memory and pids limits from flower.env; /tmp writable."""
    federation, _, _ = federation
    name = federation.compose("run", "-d", "--no-deps", "operator", "sleep", "120").stdout.strip().splitlines()[-1]
    operator = docker_client.containers.get(name)
    try:
        containers = federation.containers(docker_client, include_stopped=True)
        services = {c.labels["com.docker.compose.service"] for c in containers}
        assert (
            {"superlink-net", "superlink", "fleet-proxy", "operator", *NODES}
            <= services
            <= {"superlink-net", "superlink", "fleet-proxy", "operator", *NODES, ROGUE}
        )  # the rogue once its test started it
        for container in containers:
            host = container.attrs["HostConfig"]
            assert [c.upper() for c in host["CapDrop"]] == ["ALL"] and not host["CapAdd"], container.name
            assert "no-new-privileges:true" in host["SecurityOpt"], container.name
            assert host["ReadonlyRootfs"] is True and host["Privileged"] is False, container.name
            assert host["Memory"] > 0 and host["PidsLimit"] > 0, container.name
            assert host["PidsLimit"] == federation.hardening()["pids_limit"], container.name
            assert container.attrs["Config"]["User"] == "10001:10001", container.name
            if container.status == "running":
                assert_root_read_only(container)
                assert container.exec_run(["touch", "/tmp/x"]).exit_code == 0, container.name
                assert_no_capability_inside(container)
        restarts = {
            c.labels["com.docker.compose.service"]: c.attrs["HostConfig"]["RestartPolicy"]["Name"] for c in containers
        }
        for service in ("superlink-net", "superlink", "fleet-proxy", *NODES):  # faults.md: back by themselves
            assert restarts[service] == "unless-stopped", (service, restarts[service])
        memory = {c.labels["com.docker.compose.service"]: c.attrs["HostConfig"]["Memory"] for c in containers}
        assert memory["superlink"] == _memory_bytes(federation.setting("FLOWER_SUPERLINK_MEMORY"))
        assert memory[NODES[0]] == _memory_bytes(federation.setting("FLOWER_SUPERNODE_MEMORY"))
        assert memory["fleet-proxy"] == _memory_bytes(federation.setting("FLOWER_PROXY_MEMORY"))
    finally:
        operator.remove(force=True)


def test_run_on_the_federation_matches_the_reference(federation, docker_client, tier_report):
    """fltest-flower run with a model module and hooks beside the config: they travel in the Flower App to the SuperNodes.

    fltest runs in the SuperLink's namespace; results land on the host, the invoking user's, as the reference's.
    The run reuses the shard set ``fltest-flower prepare`` made; every client trains in round 1
    (``fraction_fit`` 1), so no SuperNode is asked a query first: its first message of the run is round 1's.
    """
    federation, config, root = federation
    began = int(time.time())
    results = root / "results"
    folder = root / "experiment"  # the config's own folder, mounted read-only: not the one holding the keys
    folder.mkdir()
    (folder / "my_model.py").write_text(MODEL)  # the model whose weights are shaped like the 8x8 images
    (folder / "my_hooks.py").write_text((REPO / "examples" / "digits_hooks.py").read_text())
    path = _cli_config(config, folder, "full", keep_reference=True, model={"module": "my_model"}, hooks="my_hooks")
    start = time.perf_counter()
    result = _flower_cli(federation, "run", str(path), "--results-dir", str(results), timeout=RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    assert f"reused {len(NODES)} mmap shards" in result.stderr, result.stderr  # fltest-flower prepare's, not made again
    comparison = json.loads((results / config.name / "comparison.json").read_text())
    runs = {run["run"]: run for run in comparison["runs"]}
    assert runs["flower"]["status"] == "completed", runs["flower"]
    assert runs["flower"]["rounds_completed"] == ROUNDS
    assert_conforms(results / config.name, "flower", ROUNDS)
    assert [p.shape for p in load_params(results / config.name / "flower" / "model_final.npz")] == [(8, 8, 10), (10,)]
    last = read_jsonl(results / config.name / "flower" / "metrics.jsonl")[-1]["train"]
    assert (
        last["batches"] > 0 and last["update_norm"] > 0
    )  # the module's train and the hooks' after_local_training, on the nodes
    summary = json.loads((results / config.name / "flower" / "summary.json").read_text())
    assert sorted(summary["client_hosts"]) == [federation.container_name(n) for n in NODES]  # each in its own container
    for node in NODES:
        received = re.findall(
            r"Receiving: (\w+) message", _container(federation, docker_client, node).logs(since=began).decode()
        )
        assert received == ["train"] * ROUNDS, (node, received)
    assert {(p.stat().st_uid, p.stat().st_gid) for p in results.rglob("*")} == {(os.getuid(), os.getgid())}
    tier_report(
        f"flower: fltest-flower run, {ROUNDS} rounds on {len(NODES)} SuperNodes (with the reference) in {elapsed:.1f} s"
    )


def test_a_private_run_on_the_federation_is_the_reference_s_model_noise_included(federation, tier_report):
    """Client-side fixed clipping with noise: Flower's fixedclipping_mod clips in each SuperNode's ClientApp process,
    the ServerApp on the SuperLink runs Flower's wrapper with the generator FLTest seeds; the model is the reference's
    bit for bit, and each round's release (its noise measured, ε from Flower's accountant) is the reference's."""
    federation, config, root = federation
    results = root / "results-private"
    privacy = {"mechanism": "fixed_clipping", "side": "client", "clipping_norm": 1.0, "noise_multiplier": 0.5}
    path = _cli_config(config, root, "private", keep_reference=True, privacy=privacy)
    start = time.perf_counter()
    result = _flower_cli(federation, "run", str(path), "--results-dir", str(results), timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {run["run"]: run for run in json.loads((results / config.name / "comparison.json").read_text())["runs"]}
    assert runs["flower"]["agreement"] == "identical", runs["flower"]
    released = {
        run: [record["privacy"] for record in read_jsonl(results / config.name / run / "metrics.jsonl")[1:]]
        for run in ("reference", "flower")
    }
    assert released["flower"] == released["reference"] and released["flower"][-1]["epsilon"] > 0, released
    tier_report(
        f"flower: a private run (client-side clipping, noise 0.5) on the federation in {time.perf_counter() - start:.1f} s"
    )


def _user_app(root: Path, name: str, *dependencies: str) -> Path:
    """A copy of the tests' Flower App in a folder of the user's, its pyproject.toml needing ``dependencies`` too."""
    folder = root / name
    shutil.copytree(APP, folder)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            '    "numpy>=2.0",\n', '    "numpy>=2.0",\n' + "".join(f'    "{d}",\n' for d in dependencies)
        )
    )
    return folder


def _fltest_flwr(federation, folder: Path, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """``fltest-flower flwr <args>`` run from ``folder``, as a user runs it from their App's folder."""
    command = [sys.executable, "-m", "deploy.commands.fltest_flower", "flwr", *args]
    return subprocess.run(
        command, cwd=folder, env=_flower_env(federation), capture_output=True, text=True, timeout=timeout
    )


def _started_run(output: str) -> int:
    found = re.search(r"Successfully started run (\d+)", output)
    assert found, output[-3000:]
    return int(found.group(1))


def _run_lines(listed: str) -> list[str]:
    """The Flower runs ``fltest-flower list`` shows after the SuperNodes."""
    return [line for line in listed.splitlines() if line.startswith("run ")]


def _files_come_back_through_the_data_filter(federation, docker_client, root: Path) -> None:
    """What an App may leave in its working folder, copied by ``fltest-flower files`` through tarfile's ``data`` filter
    (own-flower-app.md): links out of the folder are left out and named, set-id bits dropped, the rest copied."""
    node = _container(federation, docker_client, NODES[0])
    made = node.exec_run(
        ["sh", "-c", "ln -s /etc/passwd passwd && ln -s ../.. up && : > set-id && chmod 6755 set-id"],
        user=str(KIT.uid),
        workdir=KIT.app_files_dir,
    )
    assert made.exit_code == 0, made.output
    try:
        result = _flower_cli(federation, "files", "--out", str(root / "filtered"))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        line = next(line for line in result.stdout.splitlines() if line.startswith(f"{NODES[0]}: "))
        left_out = line.partition("; left out (links out of the folder, special files): ")[2]
        assert sorted(left_out.split(", ")) == ["passwd", "up"], line
        copied = root / "filtered" / NODES[0]
        assert {"client-0.txt", "set-id"} <= {p.name for p in copied.iterdir()} and not (copied / "passwd").exists()
        assert not (copied / "up").is_symlink()
        assert (copied / "set-id").stat().st_mode & 0o7777 == 0o755  # no set-uid or set-gid bit
    finally:
        node.exec_run(["rm", "-f", "passwd", "up", "set-id"], user=str(KIT.uid), workdir=KIT.app_files_dir)
        shutil.rmtree(root / "filtered", ignore_errors=True)


def test_a_flower_app_of_the_user_runs_through_fltest_flower_flwr_and_its_files_come_back(
    federation, docker_client, tier_report
):
    """The issue's measured failure: a Flower App (not fltest's) had no way onto the federation, and its ServerApp's
    final_model.npz failed with EROFS in the read-only container (exit 201). Now, from the App's folder, ``fltest-flower
    flwr run . fltest --stream`` runs it to the end; each ClientApp read its partition from the ``data-path`` of its node
    config; ``fltest-flower list`` lists the run beside fltest's own; ``fltest-flower files`` brings back what the
    ServerApp and each ClientApp wrote in their working folders, bounded tmpfs volumes of their own."""
    federation, _, root = federation
    folder = _user_app(root, "my-app")
    start = time.monotonic()
    path = os.pathsep.join([str(Path(sys.prefix) / "bin"), os.environ["PATH"]])  # the venv, active
    result = run_block(doc_block("own-flower-app/emulation"), cwd=root, env={**_flower_env(federation), "PATH": path})
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    streamed, submitted = [int(run) for run in re.findall(r"Successfully started run (\d+)", result.stdout)]
    assert (
        f"tiny-app: 2 rounds on {len(NODES)} SuperNodes, model saved to final_model.npz" in result.stdout
    )  # the streamed run's ServerApp log
    (line,) = [line for line in _run_lines(result.stdout) if line.split()[1] == str(streamed)]
    assert re.fullmatch(rf"run +{streamed}  finished:completed +fltest-tests/tiny-app 1\.0\.0  [\d.]+ s", line), line
    assert any(
        " fltest/fltest-app " in line for line in _run_lines(result.stdout)
    )  # fltest's own run of this module, the same way

    out = folder / "app-files"  # files --out app-files, in the App's folder
    copied = next(line for line in result.stdout.splitlines() if line.startswith("superlink: "))
    assert copied.startswith("superlink: 1 file, ") and copied.endswith(f" -> {out}/superlink"), copied
    model = np.load(out / "superlink" / "final_model.npz")
    assert [array.tolist() for array in model.values()] == [
        [3.0, 3.0, 3.0]
    ]  # 2 rounds of the mean of (partition id + 1) over 2 nodes
    for partition_id, node in enumerate(NODES):
        assert (out / node / f"client-{partition_id}.txt").read_text() == "round 1\nround 2\n"
    assert {(p.stat().st_uid, p.stat().st_gid) for p in out.rglob("*")} == {(os.getuid(), os.getgid())}
    deadline = time.monotonic() + RUN_TIMEOUT_S  # the last command returned at once: its 5 rounds go on
    while not (status := _flower_run_status(federation, submitted)).startswith("finished"):
        assert time.monotonic() < deadline, status
        time.sleep(2)
    assert status == "finished:completed"

    _files_come_back_through_the_data_filter(federation, docker_client, root)

    size = _memory_bytes(federation.setting("FLOWER_APP_FILES_SIZE"))
    volumes = set()
    for service in ("superlink", *NODES):
        container = _container(federation, docker_client, service)
        assert container.attrs["Config"]["WorkingDir"] == KIT.app_files_dir, service
        mount = {m["Destination"]: m for m in container.attrs["Mounts"]}[KIT.app_files_dir]
        assert mount["Type"] == "volume" and mount["RW"] is True, (service, mount)
        options = docker_client.volumes.get(mount["Name"]).attrs["Options"]
        assert options["type"] == "tmpfs" and f"size={federation.setting('FLOWER_APP_FILES_SIZE')}" in options["o"], (
            service,
            options,
        )
        statvfs = f"import os; s = os.statvfs({KIT.app_files_dir!r}); print(s.f_blocks * s.f_frsize)"
        assert int(container.exec_run(["python", "-c", statvfs]).output) == size, (
            service
        )  # bounded: the tmpfs's own size
        volumes.add(mount["Name"])
    assert len(volumes) == 1 + len(NODES)  # a volume of its own per container
    tier_report(
        f"flower: the tests' own Flower App through fltest-flower flwr, 2 rounds, in {elapsed:.1f} s; its files back"
    )


def test_ctrl_c_on_a_streamed_flwr_run_stops_the_flower_run(federation, docker_client, tier_report):
    """flwr's own Ctrl-C only stops following a streamed run (checked with Flower 1.42: it exits 0, the run goes on).
    Ctrl-C on ``fltest-flower flwr run . fltest --stream`` stops the run too: exit 130 and one line naming it."""
    federation, _, root = federation
    folder = _user_app(root, "my-long-app")
    command = [
        sys.executable,
        "-m",
        "deploy.commands.fltest_flower",
        "flwr",
        "run",
        ".",
        "fltest",
        "--stream",
        "--run-config",
        LONG_RUN,
    ]
    process = subprocess.Popen(
        command,
        cwd=folder,
        env=_flower_env(federation),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    round_2 = threading.Event()

    def follow() -> None:
        for line in process.stdout:
            lines.append(line)
            if "[ROUND 2/" in line:
                round_2.set()

    threading.Thread(target=follow, daemon=True).start()
    try:
        assert round_2.wait(RUN_TIMEOUT_S), "".join(lines)[-3000:]
        os.killpg(process.pid, signal.SIGINT)
        signalled = time.monotonic()
        _, stderr = process.communicate(timeout=120)
        stopped_after = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
    run_id = _started_run("".join(lines))
    tier_report(
        f"flower: fltest-flower flwr run --stream stopped by Ctrl-C at round 2: exit {process.returncode} after {stopped_after:.1f} s"
    )
    assert process.returncode == 130, stderr[-3000:]
    assert re.fullmatch(
        rf"fltest-flower: interrupted \(SIGINT\): flwr in {PROJECT}-flwr-\d{{8}}-\d{{6}} stopped; Flower run {run_id} "
        r"stopped \(flwr stop\); SuperNodes restarted \(2\)",
        stderr.strip().splitlines()[-1],
    ), stderr[-3000:]
    assert _flower_run_status(federation, run_id) == "finished:stopped"
    assert federation.containers(docker_client, "flwr", include_stopped=True) == []


def test_an_app_run_is_listed_while_it_runs_and_fltest_flower_stop_stops_it(federation, docker_client):
    """``flwr run`` without --stream returns once the run is submitted; ``fltest-flower list`` shows it unfinished and
    ``fltest-flower stop`` (which ``down`` plays first) stops it, as it stops fltest's own."""
    federation, _, root = federation
    result = _fltest_flwr(federation, _user_app(root, "my-app-to-stop"), "run", ".", "fltest", "--run-config", LONG_RUN)
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = _started_run(result.stdout)
    listed = _flower_cli(federation, "list")
    (line,) = [line for line in _run_lines(listed.stdout) if line.split()[1] == str(run_id)]
    assert line.split()[2] in ("pending", "starting", "running"), line
    stop = _flower_cli(federation, "stop")
    assert stop.returncode == 0, stop.stderr
    assert f"Flower run {run_id}: stopped (flwr stop)" in stop.stdout.splitlines()
    assert _flower_run_status(federation, run_id) == "finished:stopped"


def test_an_app_needing_a_package_the_image_lacks_is_refused_in_one_line_before_it_is_submitted(federation):
    """The kit installs nothing at run time: an App whose pyproject.toml needs torch (not in the default image) is refused
    before flwr submits it, naming the package and the image variant to build."""
    federation, _, root = federation
    folder = _user_app(root, "torch-app", "torch>=2.0")
    before = len(federation.flwr("ls", CONNECTION)["runs"])
    result = _fltest_flwr(federation, folder, "run", ".", "fltest", "--stream")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("flwr run: ")] == [
        f"flwr run: {folder}/pyproject.toml: project.dependencies: torch>=2.0: not in the image {IMAGE}, and the kit installs nothing "
        f"at run time; build the image variant that has it: fltest-deploy build --extras torch, then run the federation on {IMAGE}-torch "
        "(FLTEST_IMAGE for fltest-flower up, fltest_image for cluster.yml)"
    ], result.stderr
    assert len(federation.flwr("ls", CONNECTION)["runs"]) == before  # nothing submitted


def _wait_for_round(federation, docker_client, process: subprocess.Popen, metrics: Path, server_round: int) -> None:
    """Wait until the run ``process`` made has recorded ``server_round`` in ``metrics``. If the process ends first, or
    RUN_TIMEOUT_S passes, fail at once with what would explain it: the command's last output, the SuperNodes' last
    log lines (the process is killed; the test's own clean-up removes its operator container)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) > server_round):
        if process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            continue
        ended = process.poll()
        process.kill()
        stdout, stderr = process.communicate(timeout=60)
        recorded = metrics.read_text().splitlines() if metrics.is_file() else []
        nodes = {node: _container(federation, docker_client, node, True).logs(tail=15).decode() for node in NODES}
        pytest.fail(
            f"round {server_round} not recorded ({len(recorded)} lines in {metrics.name}); fltest-flower run "
            + (f"exited {ended}" if ended is not None else f"still running after {RUN_TIMEOUT_S} s")
            + f":\n{(stdout + stderr)[-3000:]}\n"
            + "\n".join(f"--- {node}'s last log lines:\n{log}" for node, log in nodes.items())
        )


def _wait_for(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.5)


def _cli_config(
    config: ExperimentConfig,
    root: Path,
    name: str,
    keep_reference: bool = False,
    model: dict | None = None,
    hooks: str | None = None,
    **training,
) -> Path:
    """The deployment run (and the reference) as a YAML file for ``fltest-flower run``: ``training`` settings changed, a model and hooks named."""
    data = config.model_dump(mode="json")
    data["runs"] = [run for run in data["runs"] if keep_reference or run["framework"] == "flwr"]
    data["training"].update(training)
    data.update({key: value for key, value in (("model", model), ("hooks", hooks)) if value is not None})
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _flower_env(federation) -> dict[str, str]:
    """The environment of ``fltest-flower`` for the test's project (its settings)."""
    return {
        **os.environ,
        **federation.overrides,
        "COMPOSE_PROJECT_NAME": federation.name,
        "FLOWER_GENERATED_DIR": str(federation.generated_dir),
    }


def _flower_cli(federation, *args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``fltest-flower <args>`` on the test's project."""
    command = [sys.executable, "-m", "deploy.commands.fltest_flower", *args]
    return subprocess.run(command, env=_flower_env(federation), capture_output=True, text=True, timeout=timeout)


def _flower_run(federation, path: Path, results: Path) -> subprocess.Popen:
    """``fltest-flower run <path> --results-dir <results>``, started."""
    command = [sys.executable, "-m", "deploy.commands.fltest_flower", "run", str(path), "--results-dir", str(results)]
    return subprocess.Popen(
        command, env=_flower_env(federation), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _failure_line(stderr: str) -> str:
    """The one line ``fltest run`` logs for the failed run."""
    lines = [line for line in stderr.splitlines() if line.startswith("run flower failed: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _remove_operator_runs(federation, client) -> None:
    """Remove one-off operator containers a killed ``fltest-flower run`` left (its compose client died, not them)."""
    for container in federation.containers(client, "operator", include_stopped=True):
        container.remove(force=True)


def _restore(federation, client, node: str) -> float:
    """Start ``node``'s container if it is not running; seconds until the SuperLink reports it online."""
    _remove_operator_runs(federation, client)
    start = time.monotonic()
    container = _container(federation, client, node, include_stopped=True)
    container.reload()
    if container.status != "running":
        container.start()
    federation.wait_online([federation.node_ids()[node]], TIMEOUT_S)
    return time.monotonic() - start


def test_supernode_killed_during_a_run_fails_naming_it(federation, docker_client, tier_report):
    """A SuperNode killed mid-run: one line naming its container, partition and the cause, within the heartbeat bound."""
    federation, config, root = federation
    victim, bound = NODES[1], HEARTBEAT_S + 30  # + the ServerApp's poll, the log stream, fltest's report
    results = root / "results-killed"
    process = _flower_run(
        federation, _cli_config(config, root, "killed", rounds=50, round_timeout_s=3 * HEARTBEAT_S), results
    )
    metrics = results / config.name / "flower" / "metrics.jsonl"
    try:
        _wait_for_round(federation, docker_client, process, metrics, 1)
        _container(federation, docker_client, victim).kill()
        killed = time.monotonic()
        _, stderr = process.communicate(timeout=bound)
        elapsed = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
        recovery = _restore(federation, docker_client, victim)
    tier_report(
        f"flower: SuperNode killed -> failure line in {elapsed:.1f} s; back online {recovery:.1f} s after its start"
    )
    assert process.returncode == 1
    expected = (
        rf"run flower failed: Flower run \d+: round \d+: client 1 \(SuperNode {federation.container_name(victim)}, "
        rf"Flower node {federation.node_ids()[victim]}\) failed: node unavailable: no heartbeat for 2 heartbeat "
        r"intervals \(stopped, or cut off from the SuperLink\)"
    )
    assert re.fullmatch(expected, _failure_line(stderr))
    assert elapsed < bound


def _flower_run_as_a_user(federation, path: Path, results: Path) -> subprocess.Popen:
    """``fltest-flower run`` in a session of its own from the config's folder, SIGINT handled as in a terminal."""
    command = [sys.executable, "-m", "deploy.commands.fltest_flower", "run", path.name, "--results-dir", str(results)]
    return subprocess.Popen(
        command,
        cwd=path.parent,
        env=_flower_env(federation),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def online_node_ids(federation) -> list[int]:
    """The node ids the SuperLink lists online."""
    return [int(n["node-id"]) for n in federation.registered() if n["status"] == "online"]


def _flower_run_status(federation, run_id: int) -> str:
    return federation.flwr("ls", CONNECTION, "--run-id", str(run_id))["runs"][0]["status"]


def test_a_client_that_raises_in_round_1_is_named_by_its_supernode(federation, tier_report):
    """A user's bug shows in round 1, before the server knows which node holds which partition: it asks the
    failing SuperNode, and the one line names its container, its partition and the cause."""
    federation, config, root = federation
    folder = root / "raising"
    folder.mkdir()
    (folder / "raising_hooks.py").write_text(
        "def before_local_training(partition_id, server_round, x, y):\n"
        "    if partition_id == 1:\n"
        "        raise ValueError('client one broke')\n"
    )
    path = _cli_config(config, folder, "raising", hooks="raising_hooks")
    start = time.monotonic()
    result = _flower_cli(
        federation, "run", str(path), "--results-dir", str(root / "results-raising"), timeout=RUN_TIMEOUT_S
    )
    tier_report(f"flower: a client raising in round 1 -> failure line in {time.monotonic() - start:.1f} s")
    assert result.returncode == 1, result.stderr
    expected = (
        rf"run flower failed: Flower run \d+: round 1: client 1 \(SuperNode {federation.container_name(NODES[1])}, "
        rf"Flower node {federation.node_ids()[NODES[1]]}\) failed: .*client one broke.*"
    )
    assert re.fullmatch(expected, _failure_line(result.stderr)), _failure_line(result.stderr)


def test_a_supernode_that_cannot_say_its_partition_is_named_by_its_flower_node_id(federation, tier_report):
    """faults.md's fallback: a SuperNode whose ClientApp fails in round 1 and again when asked which partition it
    holds (its folder holds another experiment's partition: ``prepare`` was not run again) is named by its Flower
    node id, which ``fltest-flower list`` maps to its container."""
    federation, config, root = federation
    meta = federation.path("FLOWER_DATA_DIR") / NODES[1] / "partition.json"
    prepared = meta.read_text()
    meta.write_text(prepared.replace(json.loads(prepared)["shards-key"], "another-experiment"))
    try:
        path = _cli_config(config, root, "unnamed")
        result = _flower_cli(
            federation, "run", str(path), "--results-dir", str(root / "results-unnamed"), timeout=RUN_TIMEOUT_S
        )
    finally:
        meta.write_text(prepared)
    assert result.returncode == 1, result.stderr
    expected = (
        rf"run flower failed: Flower run \d+: round 1: client on Flower node {federation.node_ids()[NODES[1]]} failed: "
        r".*partition of shard set another-experiment .*: export it again"
    )
    assert re.fullmatch(expected, _failure_line(result.stderr)), _failure_line(result.stderr)
    listed = _flower_cli(federation, "list")
    node_line = rf"^ *{federation.node_ids()[NODES[1]]}  \S+ +{NODES[1]}$"  # its node id, its SuperNode
    assert re.search(node_line, listed.stdout, re.M), listed.stdout


def test_ctrl_c_on_fltest_flower_run_stops_the_flower_run_and_keeps_its_rounds(federation, docker_client, tier_report):
    """Ctrl-C (SIGINT to the command's process group: compose too, before) at round 2 of 300: the operator container and
    the Flower run on the SuperLink stop within the bound, the rounds and an ``interrupted`` summary are on the host."""
    federation, config, root = federation
    results = root / "results-ctrlc"
    process = _flower_run_as_a_user(federation, _cli_config(config, root, "ctrlc", rounds=300), results)
    metrics = results / config.name / "flower" / "metrics.jsonl"
    try:
        _wait_for_round(federation, docker_client, process, metrics, 2)
        os.killpg(process.pid, signal.SIGINT)
        signalled = time.monotonic()
        _, stderr = process.communicate(timeout=INTERRUPT_BOUND_S + 30)
        stopped_after = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
        _remove_operator_runs(federation, docker_client)
    tier_report(
        f"flower: fltest-flower run stopped by Ctrl-C at round 2: exit {process.returncode} after {stopped_after:.1f} s"
    )
    lines = stderr.strip().splitlines()
    assert process.returncode == 130, lines[-20:]
    assert re.fullmatch(
        rf"fltest-flower: interrupted \(SIGINT\): fltest run in {PROJECT}-operator-\d{{8}}-\d{{6}} stopped;"
        rf" SuperNodes restarted \(2\); its rounds so far and summary: {re.escape(str(results / config.name))}",
        lines[-1],
    ), lines[-20:]
    summary = json.loads((results / config.name / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["rounds_completed"] < 300, summary
    assert _flower_run_status(federation, summary["flower_run_id"]) == "finished:stopped"
    # Within the bound the stop's own deadlines make (a deadline missed fails it with its own line instead): how long
    # it takes is the tier report's figure (45-90 s, most of it the SuperNodes' restart until online).
    assert stopped_after < INTERRUPT_BOUND_S
    assert federation.containers(docker_client, "operator", include_stopped=True) == []
    assert set(online_node_ids(federation)) == set(
        federation.node_ids().values()
    )  # restarted, and online for the next run


def test_a_run_left_by_a_killed_fltest_flower_is_refused_by_the_next_and_stop_ends_it(federation, docker_client):
    """``fltest-flower run`` killed outright: its operator goes on; the next run refuses in one line naming it and how to
    stop it; ``fltest-flower stop`` stops it (its Flower run too) and keeps its rounds."""
    federation, config, root = federation
    results = root / "results-orphan"
    path = _cli_config(config, root, "orphan", rounds=300)
    process = _flower_run_as_a_user(federation, path, results)
    metrics = results / config.name / "flower" / "metrics.jsonl"
    try:
        _wait_for_round(federation, docker_client, process, metrics, 2)
        process.kill()  # its compose, in a session of its own, stays attached to the operator and to these pipes
        process.wait()
        (operator,) = federation.containers(docker_client, "operator")
        refused = _flower_cli(federation, "run", str(path), "--results-dir", str(root / "results-refused"))
        stop = _flower_cli(federation, "stop")
    finally:
        _remove_operator_runs(federation, docker_client)
        process.stdout.close()
        process.stderr.close()
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"fltest-flower: error: an experiment still runs next to the SuperLink: container {operator.name}"
        f" (fltest run {path} --results-dir {results}); stop it with: fltest-flower stop"
    )
    assert stop.returncode == 0, stop.stderr
    assert (
        stop.stdout.splitlines()[0] == f"container {operator.name} (fltest run {path} --results-dir {results}): stopped"
    )
    summary = json.loads((results / config.name / "flower" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] >= 2, summary
    assert _flower_run_status(federation, summary["flower_run_id"]) == "finished:stopped"


def _status(federation) -> dict[int, str]:
    return {int(n["node-id"]): n["status"] for n in federation.registered()}


def test_run_with_no_supernode_online_fails_at_once(federation, docker_client, tier_report):
    """SuperNodes stopped: the run is refused with one line saying so, and the Flower run fltest submitted while it
    asked is stopped (its ServerApp waits for the nodes before it sends anything): none is left unfinished."""
    federation, config, root = federation
    for node in NODES:
        _container(federation, docker_client, node).stop(timeout=10)
    try:
        _wait_for(lambda: "online" not in _status(federation).values(), TIMEOUT_S, "the SuperNodes to be offline")
        start = time.monotonic()
        # A round timeout far above the bound: waiting for the nodes instead of asking first would fail the bound.
        process = _flower_run(
            federation, _cli_config(config, root, "offline", round_timeout_s=900), root / "results-offline"
        )
        _, stderr = process.communicate(timeout=TIMEOUT_S)
        elapsed = time.monotonic() - start
        left = unfinished_flower_runs(federation)
    finally:
        recovery = sum(_restore(federation, docker_client, node) for node in NODES)
    tier_report(
        f"flower: no SuperNode online -> failure line in {elapsed:.1f} s (whole fltest-flower run); back online in {recovery:.1f} s"
    )
    assert process.returncode == 1
    assert _failure_line(stderr) == (
        f"run flower failed: SuperLink {federation.address}: 0 of {len(NODES)} SuperNodes online ({len(NODES)} offline):"
        " start them, or check their logs, then run again"
    )
    assert elapsed < SETUP_BOUND_S
    assert left == []


def test_superlink_restart_keeps_registrations_and_the_next_run_completes(federation, docker_client, tier_report):
    """docker restart of the SuperLink and of the Fleet proxy: the SuperLink's state survives, the namespace holder
    (which the two share) is untouched (security.md), the SuperNodes come back by themselves, a new run completes."""
    federation, config, root = federation
    node_ids = [federation.node_ids()[node] for node in NODES]
    holder_started = _container(federation, docker_client, "superlink-net").attrs["State"]["StartedAt"]
    _container(federation, docker_client, "superlink").restart(timeout=10)
    _container(federation, docker_client, "fleet-proxy").restart(timeout=10)
    restarted = time.monotonic()
    federation.wait_superlink(docker_client, TIMEOUT_S)
    federation.wait_online(node_ids, TIMEOUT_S)
    recovery = time.monotonic() - restarted
    assert _container(federation, docker_client, "superlink-net").attrs["State"]["StartedAt"] == holder_started
    listed = _flower_cli(federation, "list")
    assert listed.returncode == 0, listed.stderr
    assert (
        sorted(line.split()[2] for line in listed.stdout.splitlines() if line not in _run_lines(listed.stdout)) == NODES
    )
    start = time.monotonic()
    result = _flower_cli(
        federation,
        "run",
        str(_cli_config(config, root, "restarted", round_timeout_s=180)),
        "--results-dir",
        str(root / "results-restarted"),
        timeout=RUN_TIMEOUT_S,
    )
    tier_report(
        f"flower: SuperLink restarted -> SuperNodes online in {recovery:.1f} s; next run {time.monotonic() - start:.1f} s"
    )
    assert result.returncode == 0, result.stderr


def test_list_fails_when_the_superlink_is_down_or_lost_registrations(federation, docker_client):
    """fltest-flower list: one line and exit 1 for a SuperLink that is down, or that no longer knows a saved node."""
    federation, _, _ = federation
    saved = federation.node_ids()
    federation.save_node_ids({**saved, "supernode-9": 12345})  # a registration the SuperLink does not hold
    try:
        lost = _flower_cli(federation, "list")
    finally:
        federation.save_node_ids(saved)
    assert lost.returncode == 1
    assert lost.stderr.splitlines() == [
        f"fltest-flower: error: SuperLink of project {PROJECT}: does not know supernode-9"
        " (state lost? fltest-flower up registers them again)"
    ]
    superlink = _container(federation, docker_client, "superlink")
    superlink.stop(timeout=10)
    try:
        down = _flower_cli(federation, "list")
    finally:
        superlink.start()
        federation.wait_superlink(docker_client, TIMEOUT_S)
        federation.wait_online([saved[node] for node in NODES], TIMEOUT_S)
    assert (down.returncode, down.stdout) == (1, "")
    assert down.stderr.splitlines() == [f"fltest-flower: error: SuperLink container {superlink.name}: not running"]


def test_unregistered_supernode_can_no_longer_connect(federation, docker_client):
    federation, _, _ = federation
    node_id = federation.node_ids()[NODES[1]]
    unregister = _flower_cli(federation, "unregister", str(node_id))
    assert (unregister.returncode, unregister.stdout) == (0, f"node {node_id}: unregistered\n"), unregister.stderr
    status = {int(n["node-id"]): n["status"] for n in federation.registered()}
    assert status[node_id] == "unregistered"
    # The node's own container is stopped for the rest of the module, and the node started again as a one-off
    # container of its service (its key, no restart policy), whose one exit is the answer. Not the node's own
    # container's next exit after a stop and start: CI saw code 0 there three times, a graceful stop's; most likely
    # Docker 20.10's stop of a container its restart policy is retrying raced the start after it (not proven).
    _container(federation, docker_client, NODES[1], include_stopped=True).stop(timeout=10)
    command, env = federation.compose_command("run", "--rm", "--no-deps", "-T", "--name", f"{PROJECT}-again", NODES[1])
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    logs = again.stdout + again.stderr
    assert again.returncode == REFUSED_EXIT, logs[-2000:]
    assert "Exit Code: 305" in logs and "Failed to activate SuperNode" in logs, logs[-2000:]
    status = {int(n["node-id"]): n["status"] for n in federation.registered()}
    assert (status[node_id], status[federation.node_ids()[NODES[0]]]) == ("unregistered", "online")


def test_private_keys_are_in_no_log_result_or_registration(federation, docker_client):
    """The SuperNodes' private keys in none of the project's container logs, the results, the SuperLink's list.

    An image built after a key existed holds none: tests/docker/test_image.py (a rebuild with keys in the checkout).
    """
    federation, _, root = federation
    markers = [m for node in NODES + [ROGUE] for m in private_key_markers(root / "keys" / node / PRIVATE_NAME)]
    containers = federation.containers(docker_client, include_stopped=True)
    assert len(containers) == 6  # the namespace holder, SuperLink, Fleet proxy, 2 SuperNodes, the rogue
    for container in containers:
        assert find_in_stream([container.logs()], markers) == [], container.name
    result_files = [p for p in (root / "results").rglob("*") if p.is_file()]
    assert result_files
    assert find_in_stream((p.read_bytes() for p in result_files), markers) == []
    assert not any(m in yaml.safe_dump(federation.registered()).encode() for m in markers)


def test_down_then_up_through_the_cli_registers_the_kept_keys_again(federation, docker_client, tier_report):
    """``fltest-flower down`` first stops what still runs (an App's Flower run), then removes the project and the
    SuperLink's state and keeps the keys and partitions; the next ``up`` registers the same keys again (new node ids) and brings the SuperNodes online. With both online, a run of an
    experiment with one client is refused, its Flower run stopped before it sends anything: ``clients`` must equal the
    number of SuperNodes."""
    federation, config, root = federation
    kept = {
        path: path.read_bytes()
        for node in NODES
        for path in [*(root / "keys" / node).iterdir(), root / "data" / node / "partition.json"]
    }
    old_ids = federation.node_ids()
    # What down stops before it removes anything (own-flower-app.md, faults.md): an App's Flower run going on (it
    # waits for its nodes: the test before unregistered one). An experiment left running is stopped by the same
    # code (test_a_run_left_by_a_killed_fltest_flower_... through fltest-flower stop).
    app = _fltest_flwr(
        federation, _user_app(root, "app-left"), "run", ".", "fltest", "--run-config", "num-server-rounds=50"
    )
    app_run = _started_run(app.stdout + app.stderr)
    start = time.monotonic()
    down = _flower_cli(federation, "down")
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == [
        f"Flower run {app_run}: stopped (flwr stop)",
        f"project {PROJECT}: removed (keys and partitions kept)",
    ], down.stdout
    assert federation.leftovers(docker_client) == []  # the SuperLink's state volume too
    up = _flower_cli(federation, "up", timeout=UP_TIMEOUT_S)
    elapsed = time.monotonic() - start
    assert up.returncode == 0, up.stderr
    assert (
        up.stdout.splitlines()[-1]
        == f"SuperLink {federation.address} in its own namespace (fltest-flower run <config>); {len(NODES)} SuperNodes"
    )
    assert {path: path.read_bytes() for path in kept} == kept  # the same keys and partitions, not new ones
    new_ids = federation.node_ids()
    assert sorted(new_ids) == NODES and not set(new_ids.values()) & set(old_ids.values()), (
        old_ids,
        new_ids,
    )  # registered again
    listed = _flower_cli(federation, "list")
    assert listed.returncode == 0, listed.stderr
    assert sorted(tuple(line.split()) for line in listed.stdout.splitlines()) == sorted(
        (str(new_ids[n]), "online", n) for n in NODES
    )
    tier_report(f"flower: fltest-flower down, then up: both keys registered again, SuperNodes online ({elapsed:.1f} s)")
    data = config.model_dump(mode="json") | {"clients": 1}
    data["runs"] = [run for run in data["runs"] if run["framework"] == "flwr"]
    one_client = root / "one-client.yaml"
    one_client.write_text(yaml.safe_dump(data))
    refused = _flower_cli(
        federation, "run", str(one_client), "--results-dir", str(root / "results-one-client"), timeout=TIMEOUT_S
    )
    assert refused.returncode == 1, refused.stderr
    assert _failure_line(refused.stderr) == (
        f"run flower failed: SuperLink {federation.address}: {len(NODES)} SuperNodes online, but the experiment has clients: 1"
        " (it must equal the number of SuperNodes)"
    )
    assert unfinished_flower_runs(federation) == []
