"""Wait until the Ray cluster reports every node of the compose project and their CPUs."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

from deploy.compose import SERVICE_LABEL
from deploy.node.ray_start import NODE_START_FILE
from deploy.ray_emulation.project import HEAD_SERVICE, WORKER_SERVICE, ClusterShape, RayEmulation
from fltest.errors import FLTestError

POLL_INTERVAL_S = 2.0


@dataclass(frozen=True)
class ClusterState:
    """What Ray reports (live nodes by container name, total CPUs) against what the settings ask."""

    shape: ClusterShape
    nodes: dict[str, float]  # container name -> CPUs, for the project's containers Ray lists
    missing: list[str]  # what is not there, one phrase each
    cpus: float
    node_gpus: dict[str, float] = field(default_factory=dict)  # container name -> GPUs, as nodes
    gpus: float = 0.0

    @property
    def ready(self) -> bool:
        """Every expected node is live and the CPU and GPU totals are the pinned ones."""
        return (
            not self.missing
            and len(self.nodes) == self.shape.nodes
            and self.cpus == self.shape.cpus
            and self.gpus == self.shape.gpus
        )

    def summary(self, of_shape: bool = False) -> str:
        """``3 nodes, 3 CPUs`` (``3/3 nodes, 3/3 CPUs`` with ``of_shape``), GPUs added when the cluster has or expects any."""

        def part(count: float, expected: float, unit: str) -> str:
            return f"{count:g}/{expected:g} {unit}" if of_shape else f"{count:g} {unit}"

        text = f"{part(len(self.nodes), self.shape.nodes, 'nodes')}, {part(self.cpus, self.shape.cpus, 'CPUs')}"
        return text + (f", {part(self.gpus, self.shape.gpus, 'GPUs')}" if self.gpus or self.shape.gpus else "")


def live_ray_nodes(head) -> list[dict]:
    """Ray's live nodes, asked from inside the head container; ``[]`` while Ray does not answer."""
    result = head.exec_run(["python", "-m", "deploy.node.list_ray_nodes", "ray-head:6379"], demux=True)
    if result.exit_code != 0:
        return []
    return json.loads(result.output[0].decode().strip().splitlines()[-1])


def node_start(container) -> str:
    """The start label of the Ray node a running container started last (:data:`NODE_START_FILE`); "" if none.

    Also "" for a container that stopped or is restarting since it was listed (the engine refuses the exec).
    """
    from docker.errors import APIError

    try:
        result = container.exec_run(["cat", NODE_START_FILE], demux=True)
    except APIError:
        return ""
    return result.output[0].decode().strip() if result.exit_code == 0 and result.output[0] else ""


def cluster_state(project: RayEmulation, client) -> ClusterState:
    """Match Ray's live nodes with the project's running containers by hostname and start label.

    A killed node stays alive in Ray until it misses its heartbeats (about 30 s): a container
    started again counts only once the Ray node of its current start is there. Expected: the node
    containers the project has (:meth:`RayEmulation.deployed_shape`), or, before any exists, what
    the settings ask for.
    """
    shape = project.deployed_shape(client) or project.shape()
    containers = [
        c
        for c in project.containers(client, include_stopped=True)
        if c.labels.get(SERVICE_LABEL) in (HEAD_SERVICE, WORKER_SERVICE)
    ]  # not the dashboard's forwarder
    heads = [c for c in containers if c.labels.get(SERVICE_LABEL) == HEAD_SERVICE and c.status == "running"]
    ray_nodes = live_ray_nodes(heads[0]) if heads else []
    current = {(c.attrs["Config"]["Hostname"], node_start(c)): c.name for c in containers if c.status == "running"}
    # An image from before the start labels lists none and has no file: "" == "", matched by hostname as before.
    listed = {current[key]: n for n in ray_nodes if (key := (n["hostname"], n.get("start", ""))) in current}
    nodes = {name: n["cpus"] for name, n in listed.items()}
    missing = [f"{c.name} ({c.status}, not in Ray)" for c in containers if c.name not in nodes]
    if len(containers) < shape.nodes:
        missing.append(f"{shape.nodes - len(containers)} node container(s) not created")
    return ClusterState(
        shape=shape,
        nodes=nodes,
        missing=missing,
        cpus=sum(n["cpus"] for n in ray_nodes),
        node_gpus={name: n.get("gpus", 0.0) for name, n in listed.items()},
        gpus=sum(n.get("gpus", 0.0) for n in ray_nodes),
    )


def wait_until_ready(project: RayEmulation, client, timeout_s: float = 180.0) -> ClusterState:
    """Poll until Ray lists every node container with the pinned CPU and GPU totals; fail naming what is missing."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        state = cluster_state(project, client)
        if state.ready:
            return state
        shape = state.shape
        summary = state.summary(of_shape=True)
        if summary != last:
            print(f"[wait] Ray reports {summary}", file=sys.stderr, flush=True)
            last = summary
        if time.monotonic() >= deadline:
            what = "; ".join(state.missing) or (
                f"CPU total {state.cpus:g}, expected {shape.cpus:g}"
                if state.cpus != shape.cpus
                else f"GPU total {state.gpus:g}, expected {shape.gpus:g}"
            )
            raise FLTestError(f"Ray cluster {project.name} not ready after {timeout_s:g}s ({summary}): missing {what}")
        time.sleep(POLL_INTERVAL_S)
