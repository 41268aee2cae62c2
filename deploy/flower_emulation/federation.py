"""The Flower deployment emulation: a SuperLink and per-node SuperNodes in compose project ``fltest-flower``.

``compose/flower.yml`` holds the SuperLink, its Fleet proxy and the operator's one-off container,
all in one network namespace where the SuperLink listens on 127.0.0.1 only. Every SuperNode
mounts its own key folder and its own partition, so the SuperNode services are generated
(``.generated/supernodes.yml``) from one definition here, for the nodes asked for: N is a
setting, and a node that is refused or unregistered can be started or left out by name.
The operator's ``flwr`` commands (register, list, unregister) run inside the SuperLink's
container (``docker exec``): nothing of the SuperLink is published on the host. The SuperLink and
every SuperNode work in a bounded tmpfs volume of their own (:data:`APP_FILES_MOUNT`), where Flower
starts their ServerApps and ClientApps: an App's files land there.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import yaml

from deploy.compose import ComposeProject
from deploy.engine import docker_client
from deploy.gpus import DEVICES_VARIABLE, device_mode, device_override, gpu_count
from deploy.kit import KIT
from deploy.node.superlink_flwr import CA_MOUNT, PUBLIC_KEY_ENV, PUBLIC_KEY_FILE, SUPERLINK_ADDRESS
from deploy.pki.supernode_keys import PRIVATE_NAME, check_unique, ensure_key, node_dir
from deploy.pki.tls import TlsFiles, ensure_tls
from fltest.backends.flwr_deployment.connection import CONNECTION, flwr_what, parse_answer
from fltest.backends.flwr_deployment.node_data import export_partition
from fltest.backends.flwr_deployment.node_shard import DATA_PATH_KEY
from fltest.data.shards import ShardSet
from fltest.errors import FLTestError, InputError, RunFailed
from fltest.model.devices import CLIENT_DEVICE_VARIABLE, GPU

ENV_FILE = "flower.env"
COMPOSE_FILE = "flower.yml"
SUPERLINK_SERVICE = "superlink"
PROXY_SERVICE = "fleet-proxy"
HOLDER_SERVICE = "superlink-net"  # holds the namespace of the SuperLink, the proxy and the operator
OPERATOR_SERVICE = "operator"  # `fltest-flower run`: fltest run, one experiment at a time
FLWR_SERVICE = "flwr"  # `fltest-flower flwr`: the operator's flwr
APP_FILES_VOLUME = (
    "superlink-app-files"  # flower.yml's volume of the ServerApps' working folder; SuperNodes copy its options
)
FLEET_PORT = KIT.fleet_port  # the Fleet proxy (fleet_proxy.conf), the only listener on the compose network
FLEET_ADDRESS = f"superlink:{FLEET_PORT}"  # the SuperNodes' address: the holder's alias, a SAN of the certificate
PROXY_CONFIG = Path(__file__).resolve().parent.parent / "node" / "fleet_proxy.conf"
KEY_MOUNT = "/run/secrets/supernode"
HARDENING_KEY = "x-hardening"  # flower.yml's settings of every container, SuperNodes included
APP_FILES_MOUNT = KIT.app_files_dir  # the working folder of every ServerApp and ClientApp, a volume of its own
OPERATOR_TIMEOUT_S = 60
DATA_MOUNT = f"{KIT.home}/partition"
STOP_TIMEOUT_S = 10
GPU_SETTING = "FLOWER_SUPERNODE_GPUS"  # each SuperNode's GPUs (flower.env)


def supernode_name(index: int) -> str:
    """The service (and key folder) name of SuperNode ``index``."""
    return f"supernode-{index}"


def app_files_volume(node: str) -> str:
    """The volume of SuperNode ``node``'s App files: the working folder of its ClientApps."""
    return f"{node}-app-files"


def one_off_run(name: str, cwd: Path) -> list[str]:
    """``compose run`` and its options for the one-off container ``name``: removed at its end, nothing else
    started, no TTY, as this user, working in ``cwd``."""
    return [
        "run",
        "--rm",
        "--no-deps",
        "-T",
        "--name",
        name,
        "--user",
        f"{os.getuid()}:{os.getgid()}",
        "--workdir",
        str(cwd),
    ]


def restrict_partition(folder: Path, container_uid: int = KIT.uid) -> None:
    """Make an exported partition readable by its owner and the container user only.

    Folders 0750, files 0640. Run as root, they belong to the container user; otherwise they
    keep the owner's group, which the SuperNode's container joins (``group_add``).
    """
    as_root = os.geteuid() == 0
    for path in [folder, *folder.rglob("*")]:
        if as_root:
            os.chown(path, container_uid, container_uid)
        path.chmod(0o750 if path.is_dir() else 0o640)


@dataclass
class FlowerFederation(ComposeProject):
    """The Flower emulation's compose project (settings in ``flower.env``), its secrets, partitions and generated SuperNodes."""

    generated_dir: Path | None = None
    client: object = None  # the Docker SDK client; made on first use (:meth:`docker`)

    env_file: ClassVar[str] = ENV_FILE
    default_name: ClassVar[str] = "fltest-flower"
    stop_timeout_s: ClassVar[int] = STOP_TIMEOUT_S

    def __post_init__(self) -> None:
        """Resolve the project name and the generated folder (``FLOWER_GENERATED_DIR``, ``<compose>/.generated`` by default)."""
        super().__post_init__()
        self.generated_dir = (
            self.generated_dir or (self.directory / self.required("FLOWER_GENERATED_DIR", ".generated")).resolve()
        )

    def path(self, key: str) -> Path:
        """A folder setting, relative to the compose folder."""
        return (self.directory / self.required(key)).resolve()

    @property
    def keys_dir(self) -> Path:
        """The folder of the SuperNodes' key folders."""
        return self.path("FLOWER_KEYS_DIR")

    @property
    def address(self) -> str:
        """The SuperLink's address inside its own namespace (``fltest-flower run``; nothing is published)."""
        return SUPERLINK_ADDRESS

    def supernodes(self) -> int:
        """How many SuperNodes the settings ask for."""
        count = self.required("FLOWER_SUPERNODES")
        if not count.isdigit() or int(count) < 1:
            raise InputError(f"FLOWER_SUPERNODES={count}: expected a positive integer")
        return int(count)

    def tls(self) -> TlsFiles:
        """The CA and SuperLink certificate (created once)."""
        files, _ = ensure_tls(self.path("FLOWER_TLS_DIR"))
        return files

    def ensure_keys(self, nodes: list[str]) -> None:
        """A key pair for every node (existing ones kept); refuses two nodes with one key."""
        for node in nodes:
            ensure_key(self.keys_dir, node)
        check_unique(self.keys_dir, nodes)

    def export_partitions(self, shards: ShardSet, nodes: list[str]) -> None:
        """Export partition ``i`` of ``shards`` into node ``nodes[i]``'s data folder."""
        if len(nodes) != shards.num_clients:
            raise InputError(f"FLOWER_SUPERNODES={len(nodes)}: the experiment has {shards.num_clients} clients")
        data_dir = self.path("FLOWER_DATA_DIR")
        for index, node in enumerate(nodes):
            restrict_partition(export_partition(shards, index, data_dir / node))
        data_dir.chmod(0o700)  # the SuperNodes mount their own folder; nobody else lists them

    def container_name(self, node: str) -> str:
        """SuperNode ``node``'s container name, also its hostname: what fltest's error lines name."""
        return f"{self.name}-{node}"

    def supernode_service(self, node: str, partition_id: int, num_partitions: int) -> dict:
        """The compose service of one SuperNode: non-root, its own key and partition, read-only.

        Its container name is its hostname (:meth:`container_name`), so a run's error line
        naming the SuperNode's host names the container to look at.
        """
        node_config = f'partition-id={partition_id} num-partitions={num_partitions} {DATA_PATH_KEY}="{DATA_MOUNT}"'
        data = self.path("FLOWER_DATA_DIR") / node
        group = data.stat().st_gid if data.is_dir() else KIT.uid
        return {
            **self.hardening(),  # compose interpolates its ${FLTEST_IMAGE} here too
            **self.gpu_options(),
            "mem_limit": "${FLOWER_SUPERNODE_MEMORY}",
            **({"group_add": [str(group)]} if group != KIT.uid else {}),  # reads a partition of a non-root owner
            "container_name": self.container_name(node),
            "hostname": self.container_name(node),
            "command": [
                "flower-supernode",
                f"--superlink={FLEET_ADDRESS}",
                f"--root-certificates={CA_MOUNT}",
                f"--auth-supernode-private-key={KEY_MOUNT}/{PRIVATE_NAME}",
                f"--node-config={node_config}",
            ],
            "volumes": [
                f"{node_dir(self.keys_dir, node)}:{KEY_MOUNT}:ro",
                f"{self.path('FLOWER_TLS_DIR') / 'superlink' / 'ca.crt'}:{CA_MOUNT}:ro",
                f"{self.path('FLOWER_DATA_DIR') / node}:{DATA_MOUNT}:ro",
                f"{app_files_volume(node)}:{APP_FILES_MOUNT}",
            ],
            "working_dir": APP_FILES_MOUNT,  # each ClientApp's (a subprocess of the SuperNode), on a volume of its own
            "networks": ["flower"],
            "depends_on": {PROXY_SERVICE: {"condition": "service_healthy"}},
            "restart": "unless-stopped",  # back after a crash or a SuperLink restart; a refused key (exit 305) keeps retrying
            "healthcheck": {
                "test": [
                    "CMD",
                    "python",
                    "-c",
                    "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9094/health', timeout=4)",
                ],
                "interval": "5s",
                "timeout": "5s",
                "retries": 12,
            },
        }

    def gpu_options(self) -> dict:
        """A SuperNode's GPU (``FLOWER_SUPERNODE_GPUS``, default 0): an NVIDIA device request of that count (none with
        ``FLTEST_GPU_DEVICES=none``) and the variable telling its ClientApps to train there; nothing for 0."""
        gpus = gpu_count(self.setting(GPU_SETTING), GPU_SETTING)
        if not gpus:
            return {}
        environment = {**self.hardening()["environment"], CLIENT_DEVICE_VARIABLE: GPU}
        override = device_override({"supernode": gpus}, device_mode(self.setting(DEVICES_VARIABLE)))
        return {"environment": environment, **(override["services"]["supernode"] if override else {})}

    def hardening(self) -> dict:
        """``flower.yml``'s ``x-hardening``, what every container of the project has (the image, uid
        10001, no capabilities, no-new-privileges, a read-only root with a tmpfs ``/tmp``, a pids limit)."""
        return dict(yaml.safe_load((self.directory / COMPOSE_FILE).read_text())[HARDENING_KEY])

    def app_files_volume_options(self) -> dict:
        """``flower.yml``'s definition of the SuperLink's App files volume (a bounded tmpfs), which every SuperNode's copies."""
        return dict(yaml.safe_load((self.directory / COMPOSE_FILE).read_text())["volumes"][APP_FILES_VOLUME])

    def write_supernodes(self, nodes: Mapping[str, int], num_partitions: int) -> Path:
        """Write the generated compose file: one service per ``{node: partition_id}``, and its App files volume."""
        services = {node: self.supernode_service(node, pid, num_partitions) for node, pid in nodes.items()}
        volumes = {app_files_volume(node): self.app_files_volume_options() for node in nodes}
        path = self.generated_dir / "supernodes.yml"
        self.generated_dir.mkdir(parents=True, exist_ok=True)
        header = "# Generated by fltest-flower (deploy/flower_emulation/federation.py): one SuperNode per key. Do not edit.\n"
        path.write_text(header + yaml.safe_dump({"services": services, "volumes": volumes}, sort_keys=False))
        return path

    def supernode_services(self) -> list[str]:
        """The SuperNode services of the generated compose file (none before ``up`` wrote it)."""
        generated = self.generated_dir / "supernodes.yml"
        return list(yaml.safe_load(generated.read_text())["services"]) if generated.is_file() else []

    def compose_files(self) -> list[Path]:
        """flower.yml, and the generated SuperNodes once written."""
        generated = self.generated_dir / "supernodes.yml"
        return [self.directory / COMPOSE_FILE] + ([generated] if generated.is_file() else [])

    def environment(self) -> dict[str, str]:
        """The compose environment, with the TLS folder resolved (flower.yml mounts it)."""
        return {**super().environment(), "FLOWER_TLS_DIR": str(self.path("FLOWER_TLS_DIR"))}

    def up(self, *services: str) -> None:
        """Create or start ``services`` (all of them when none is named)."""
        self.compose("up", "--detach", *services)

    def up_superlink(self) -> None:
        """Create or start the SuperLink side: the namespace holder, the SuperLink, its Fleet proxy."""
        self.up(HOLDER_SERVICE, SUPERLINK_SERVICE, PROXY_SERVICE)

    def docker(self):
        """The Docker SDK client (one per federation, made on first use)."""
        if self.client is None:
            self.client = docker_client()
        return self.client

    def flwr(self, *args: str, public_key: str = "", timeout: float = OPERATOR_TIMEOUT_S) -> dict:
        """Run ``flwr <args> --format json`` inside the SuperLink's container, against 127.0.0.1; its answer.

        :mod:`deploy.node.superlink_flwr` writes the connection (and ``public_key``, as the file
        ``node.pub`` in the working folder) to a private folder of the container's tmpfs for this
        one command. A SuperLink
        container that is missing or stopped, a command with no answer within ``timeout``: one
        line naming the container (:class:`RunFailed`).
        """
        import docker.errors

        found = self.containers(self.docker(), SUPERLINK_SERVICE, include_stopped=True)
        if not found:
            raise RunFailed(f"project {self.name}: no {SUPERLINK_SERVICE} container (fltest-flower up)")
        container = found[0]
        command = [
            "timeout",
            str(int(timeout)),
            "python",
            "-m",
            "deploy.node.superlink_flwr",
            *args,
            "--format",
            "json",
        ]
        environment = {PUBLIC_KEY_ENV: public_key}
        try:
            code, (out, err) = container.exec_run(command, environment=environment, demux=True)
        except docker.errors.APIError as exc:
            reason = "not running" if exc.status_code == 409 else exc.explanation
            raise RunFailed(f"SuperLink container {container.name}: {reason}") from None
        if code == 124:
            raise RunFailed(
                f"SuperLink container {container.name}: flwr {flwr_what(args)}: no answer within {timeout:.0f} s"
            )
        try:
            return parse_answer(flwr_what(args), code, (out or b"").decode(), (err or b"").decode())
        except RunFailed as exc:
            raise RunFailed(f"SuperLink container {container.name}: {exc}") from None

    def register(self, node: str) -> int:
        """Register ``node``'s public key with the running SuperLink; returns its node id."""
        public = (node_dir(self.keys_dir, node) / f"{PRIVATE_NAME}.pub").read_text()
        answer = self.flwr("supernode", "register", PUBLIC_KEY_FILE, CONNECTION, "--name", node, public_key=public)
        return int(answer["node-id"])

    def save_node_ids(self, node_ids: Mapping[str, int]) -> None:
        """Remember which node id the SuperLink gave each SuperNode's key (ids are not secret)."""
        (self.generated_dir / "node-ids.json").write_text(json.dumps(dict(node_ids), indent=1))

    def node_ids(self) -> dict[str, int]:
        """The node ids saved by :meth:`save_node_ids`, by SuperNode name."""
        path = self.generated_dir / "node-ids.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def registered(self) -> list[dict]:
        """The SuperNodes the SuperLink knows (``node-id``, ``status``: registered, online, unregistered...).

        A SuperLink that does not answer is one line naming it (:class:`RunFailed`).
        """
        return list(self.flwr("supernode", "list", CONNECTION)["nodes"])

    def known_node_ids(self, nodes: list[dict] | None = None) -> dict[str, int]:
        """The saved node ids (:meth:`node_ids`) that the SuperLink still knows (``nodes``: its :meth:`registered`)."""
        known = {int(node["node-id"]) for node in (self.registered() if nodes is None else nodes)}
        return {name: node_id for name, node_id in self.node_ids().items() if node_id in known}

    def unregister(self, node_id: int) -> None:
        """Remove node ``node_id`` from the SuperLink: its key no longer connects."""
        self.flwr("supernode", "unregister", str(node_id), CONNECTION)

    def wait_superlink(self, client, timeout: float) -> None:
        """Wait until the SuperLink and its Fleet proxy (which checks /health through itself) are healthy."""
        ready = lambda: all(self._healthy(client, service) for service in (SUPERLINK_SERVICE, PROXY_SERVICE))  # noqa: E731
        self._wait(timeout, "the SuperLink and its Fleet proxy to be healthy", ready)

    def wait_online(self, node_ids: list[int], timeout: float) -> None:
        """Wait until the SuperLink reports every node of ``node_ids`` online."""

        def online() -> bool:
            status = {int(n["node-id"]): n["status"] for n in self.registered()}
            return all(status.get(node) == "online" for node in node_ids)

        self._wait(timeout, f"{len(node_ids)} SuperNodes to come online", online)

    def _healthy(self, client, service: str) -> bool:
        found = self.containers(client, service)
        return bool(found) and found[0].attrs["State"].get("Health", {}).get("Status") == "healthy"

    @staticmethod
    def _wait(timeout: float, what: str, ready) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise FLTestError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(1)
