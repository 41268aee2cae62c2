"""Start a Ray head or worker with the kit's pinned ports, CPU count and token authentication.

The compose services, the Ansible roles and a bare-metal node all start Ray through this
module, so every node of a cluster listens on the same, documented ports::

    python -m deploy.node.ray_start head --num-cpus 2
    python -m deploy.node.ray_start worker --address 10.0.0.1:6379 --num-cpus 4 --node-ip-address 10.0.0.2
    python -m deploy.node.ray_start worker --address 10.0.0.1:6379 --num-cpus 8 --num-gpus 2   # a node with 2 GPUs

The head's dashboard (web UI and HTTP API, token-protected) runs only when asked, with
``--dashboard`` or ``FLTEST_RAY_DASHBOARD=1``: the dashboard's packages (installed apart in the
image, :data:`DASHBOARD_PACKAGES`) are then put on the head's ``PYTHONPATH`` and it listens on
``--dashboard-host`` (default 0.0.0.0: in a container; compose/dashboard.yml publishes it on the
host's 127.0.0.1 only). Without it every node runs minimal Ray: no dashboard, nothing on 8265.

It replaces itself with ``ray start ... --block`` (the container's main process). It refuses
to start, with one line on stderr and exit code :data:`REFUSED` (78, ``EX_CONFIG``), without
token authentication or without a usable token file (a non-empty regular file it can read):
a restart cannot cure that. ``--refused-exit-code 0`` makes the refusal a clean stop, so
that a container restart policy of ``on-failure`` (compose/docker-compose.yml) does not loop.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Sequence

from deploy.kit import KIT
from deploy.pki.ray_token import TOKEN_HINT, token_problem
from fltest.exit_codes import ExitCode

#: Every port a node listens on; open these between the cluster's nodes, never to the world.
PORTS: dict[str, int] = {
    "gcs": KIT.ray_gcs_port,  # head only: the address every node and driver connects to
    "node_manager": 6380,
    "object_manager": 6381,
    "runtime_env_agent": 6382,
    "dashboard_agent_grpc": 6383,
    "dashboard_agent_listen": 52365,
    "metrics_export": 8080,
    "client_server": 10001,  # head only: Ray Client (ray://)
    "dashboard": 8265,  # head only
}
#: Ports of Ray's worker processes (one per worker process), inclusive.
WORKER_PORTS = (10002, 10100)
TOKEN_PATH_VARIABLE = "RAY_AUTH_TOKEN_PATH"
REFUSED = ExitCode.NODE_REFUSED  # EX_CONFIG: the node's settings are wrong, starting again will not help
DASHBOARD_VARIABLE = "FLTEST_RAY_DASHBOARD"  # "1": run the head's dashboard (compose/dashboard.yml sets it)
LOOPBACK = "127.0.0.1"
DASHBOARD_PACKAGES = "/opt/fltest/dashboard"  # Ray's `default` extra, apart from the venv (images/fltest/Dockerfile)
#: A Ray node label naming this start of the node, and the file (tmpfs in the containers) that holds it: Ray
#: keeps listing a killed node as alive until it misses its heartbeats, so a restarted node's container
#: is matched with the Ray node of its current start, not with the dead one (deploy/ray_emulation/readiness.py,
#: Ansible's fltest_ray_ready).
NODE_START_LABEL = "fltest-node-start"
NODE_START_FILE = KIT.ray_node_start_file


def start_args(
    role: str,
    num_cpus: int,
    object_store_bytes: int,
    address: str | None,
    node_ip: str | None,
    dashboard_host: str | None = None,
    start_id: str | None = None,
    num_gpus: int = 0,
) -> list[str]:
    """The ``ray start`` command line for a ``head`` or ``worker`` node.

    ``num_gpus``: Ray's ``--num-gpus``, the GPUs this node offers (logical, like ``--num-cpus``: the
    container's device request or the node's GPUs give it real ones; 0: none, never Ray's autodetection).

    ``start_id``: this start's :data:`NODE_START_LABEL` (none: no label).

    ``dashboard_host``: the head runs the dashboard, listening there; ``None``: no dashboard, and
    Ray's API server listens on the node's loopback only.
    """
    args = [
        "ray", "start", "--block", "--disable-usage-stats",
        f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
        f"--object-store-memory={object_store_bytes}",
        f"--node-manager-port={PORTS['node_manager']}",
        f"--object-manager-port={PORTS['object_manager']}",
        f"--runtime-env-agent-port={PORTS['runtime_env_agent']}",
        f"--dashboard-agent-grpc-port={PORTS['dashboard_agent_grpc']}",
        f"--dashboard-agent-listen-port={PORTS['dashboard_agent_listen']}",
        f"--metrics-export-port={PORTS['metrics_export']}",
        f"--min-worker-port={WORKER_PORTS[0]}", f"--max-worker-port={WORKER_PORTS[1]}",
    ]  # fmt: skip
    if node_ip:
        args.append(f"--node-ip-address={node_ip}")
    if start_id:
        args.append(f"--labels={NODE_START_LABEL}={start_id}")
    if role == "head":
        args += [
            "--head", f"--port={PORTS['gcs']}",
            f"--ray-client-server-port={PORTS['client_server']}",
            f"--include-dashboard={dashboard_host is not None}".lower(),
            f"--dashboard-host={dashboard_host or LOOPBACK}", f"--dashboard-port={PORTS['dashboard']}",
        ]  # fmt: skip
    else:
        args.append(f"--address={address}")
    return args


def token_refusal() -> str | None:
    """Why this node must not start (one line), or ``None``: token authentication on, token file usable."""
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return "deploy.node.ray_start: RAY_AUTH_MODE must be 'token' (set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH)"
    path = os.environ.get(TOKEN_PATH_VARIABLE, "")
    if not path:
        return f"deploy.node.ray_start: {TOKEN_PATH_VARIABLE} is unset: the Ray token file is needed"
    problem = token_problem(path)
    if problem:
        return f"deploy.node.ray_start: {TOKEN_PATH_VARIABLE}={path}: {problem} ({TOKEN_HINT} on the host)"
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the node's settings and exec ``ray start``."""
    parser = argparse.ArgumentParser(prog="python -m deploy.node.ray_start", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["head", "worker"])
    parser.add_argument("--num-cpus", type=int, required=True, help="logical CPUs: equal to the node's CPU limit")
    parser.add_argument(
        "--num-gpus",
        type=int,
        default=0,
        help="GPUs this node offers to Ray: equal to the GPUs the node (container) is given (default 0)",
    )
    parser.add_argument("--object-store-bytes", type=int, default=200 * 1024**2)
    parser.add_argument("--address", help=f"worker: the head's <host>:{PORTS['gcs']}")
    parser.add_argument("--node-ip-address", help="the node's cluster IP (needed with host networking)")
    parser.add_argument(
        "--dashboard",
        action="store_true",
        default=os.environ.get(DASHBOARD_VARIABLE) == "1",
        help=f"head: run the token-protected dashboard (also {DASHBOARD_VARIABLE}=1)",
    )
    parser.add_argument(
        "--dashboard-host",
        default="0.0.0.0",
        help="with --dashboard: the address it listens on (default 0.0.0.0, for a container)",
    )
    parser.add_argument(
        "--refused-exit-code",
        type=int,
        default=REFUSED,
        help=f"exit code of a refusal to start (default {REFUSED}; 0 with restart: on-failure)",
    )
    args = parser.parse_args(argv)
    if args.role == "worker" and not args.address:
        parser.error(f"--address: a worker needs the head's <host>:{PORTS['gcs']}")
    if args.num_cpus < 1:
        parser.error("--num-cpus: must be at least 1")
    if args.num_gpus < 0:
        parser.error("--num-gpus: must be 0 or more")
    refusal = token_refusal()
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        sys.exit(args.refused_exit_code)
    dashboard_host = args.dashboard_host if args.dashboard and args.role == "head" else None
    start_id = uuid.uuid4().hex
    with open(NODE_START_FILE, "w") as handle:  # read by the host's readiness check (docker exec cat)
        handle.write(start_id)
    command = start_args(
        args.role,
        args.num_cpus,
        args.object_store_bytes,
        args.address,
        args.node_ip_address,
        dashboard_host,
        start_id,
        args.num_gpus,
    )
    if dashboard_host is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [DASHBOARD_PACKAGES, os.environ.get("PYTHONPATH")]))
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
