"""``fltest-deploy``: build the images, bring the compose emulation up, run fltest in its head, tear it down."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.compose import COMPOSE_DIR
from deploy.engine import docker_client
from deploy.gpus import LOGICAL, NVIDIA
from deploy.kit import KIT
from deploy.ray_emulation.project import GPU_SETTINGS, HEAD_SERVICE
from fltest.command_line import run_command
from fltest.errors import InputError


def _project(args: argparse.Namespace):
    from deploy.ray_emulation.project import RayEmulation

    overrides = {"RAY_WORKERS": str(args.workers)} if getattr(args, "workers", None) is not None else {}
    if getattr(args, "gpus_per_node", None) is not None:
        if args.gpus_per_node < 0:
            raise InputError(f"--gpus-per-node {args.gpus_per_node}: expected a GPU count (0 or more)")
        overrides.update({key: str(args.gpus_per_node) for key in GPU_SETTINGS.values()})
    return RayEmulation(
        directory=Path(args.compose_dir), overrides=overrides, dashboard=getattr(args, "dashboard", False)
    )


def _token_path(project) -> Path:
    return (project.directory / (project.setting("RAY_TOKEN_FILE") or "secrets/ray_token")).resolve()


def _build(args: argparse.Namespace) -> int:
    from deploy.images import build_images, check_extras

    extras = check_extras(tuple(name for name in args.extras.split(",") if name))  # before the engine is asked
    image = build_images(docker_client(), args.pip_source, args.base_image, extras=extras)
    print(f"built {image.tags[0]} ({image.attrs['Size'] / 1e6:.0f} MB)")
    return 0


TOKEN_OUTCOMES = {
    "created": "created",
    "kept": "exists, kept",
    "replaced": "was an empty directory (Docker makes one for a missing token): replaced by a new token",
}


def _ensure_token(project) -> None:
    """Create (or replace Docker's empty directory with) the Ray token, saying so; keep a good one quietly."""
    from deploy.pki.ray_token import ensure_ray_token

    path = _token_path(project)
    outcome = ensure_ray_token(path)
    if outcome != "kept":
        print(f"{path}: {TOKEN_OUTCOMES[outcome]}")


def _token(args: argparse.Namespace) -> int:
    from deploy.pki.ray_token import ensure_ray_token

    path = _token_path(_project(args))
    print(f"{path}: {TOKEN_OUTCOMES[ensure_ray_token(path)]}")
    return 0


def _up(args: argparse.Namespace) -> int:
    from deploy.ray_emulation.readiness import wait_until_ready

    project = _project(args)
    project.gpu_override()  # bad GPU settings: one line, before the engine is asked
    client = docker_client()
    image = project.setting("FLTEST_IMAGE")
    if not client.images.list(name=image):
        raise InputError(f"FLTEST_IMAGE={image}: image not found (build it: fltest-deploy build)")
    _ensure_token(project)
    project.up(client)
    state = wait_until_ready(project, client, args.timeout)
    print(
        f"ready: {state.summary()}"
        + (" (Ray's logical GPUs: FLTEST_GPU_DEVICES=none)" if state.gpus and project.gpu_devices() == LOGICAL else "")
    )
    if project.dashboard:
        print(
            f"Ray dashboard: http://127.0.0.1:{project.setting('RAY_DASHBOARD_PORT')} (token: {_token_path(project)})"
        )
    return 0


def _wait(args: argparse.Namespace) -> int:
    from deploy.ray_emulation.readiness import wait_until_ready

    state = wait_until_ready(_project(args), docker_client(), args.timeout)
    print(f"ready: {state.summary()}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from deploy.ray_emulation.readiness import cluster_state

    client, project = docker_client(), _project(args)
    state = cluster_state(project, client)
    print(
        f"{'container':32} {'state':10} {'health':10} {'CPU limit':>9} {'Ray CPUs':>8} {'GPU devices':>11} {'Ray GPUs':>8}"
    )
    for c in project.containers(client, include_stopped=True):
        health = c.attrs["State"].get("Health", {}).get("Status", "-")
        limit = c.attrs["HostConfig"]["NanoCpus"] / 1e9
        print(
            f"{c.name:32} {c.status:10} {health:10} {limit:9g} {state.nodes.get(c.name, '-')!s:>8} "
            f"{device_count(c):>11} {state.node_gpus.get(c.name, '-')!s:>8}"
        )
    print(("ready" if state.ready else "not ready") + f": {state.summary(of_shape=True)}")
    return 0 if state.ready else 1


def device_count(container) -> str:
    """The GPUs Docker passes ``container`` (its NVIDIA device requests): a count, ``all``, or ``-`` for none."""
    counts = [
        request.get("Count", 0)
        for request in container.attrs["HostConfig"].get("DeviceRequests") or []
        if request.get("Driver") == NVIDIA or ["gpu"] in (request.get("Capabilities") or [])
    ]
    if not counts:
        return "-"
    return "all" if -1 in counts else str(sum(counts))


def _run(args: argparse.Namespace) -> int:
    from deploy.ray_emulation.readiness import cluster_state
    from deploy.ray_emulation.run_in_head import run_in_head
    from fltest.config.loader import naming_the_file
    from fltest.validate import check_cluster_gpus, check_config, gpus_asked

    config = check_config(args.config)  # bad input (the data too) fails here, before the cluster is touched
    client, project = docker_client(), _project(args)
    head = project.head(client)
    if gpus_asked(config):  # more GPUs than the cluster's nodes offer: one line before anything is staged
        with naming_the_file(args.config):
            check_cluster_gpus(
                config, list(cluster_state(project, client).node_gpus.values()), f"Ray cluster {project.name}"
            )
    return run_in_head(head, Path(args.config), config, Path(args.results_dir))


def _logs(args: argparse.Namespace) -> int:
    from deploy.ray_emulation.node_logs import print_node_logs, select_nodes

    client, project = docker_client(), _project(args)
    for container in select_nodes(project.containers(client, include_stopped=True), args.node):
        print_node_logs(container, args.lines, args.file)
    return 0


def _stop_and_rescue(client, project, results_dir: Path) -> None:
    """Stop the experiment going on in the head (as Ctrl-C), then bring every staged run's results to ``results_dir``."""
    from deploy.ray_emulation.run_in_head import describe_run, remove_staged, rescue_staged_results, stop_runs_in

    heads = project.containers(client, HEAD_SERVICE)
    for run in stop_runs_in(heads[0]) if heads else []:
        print(f"{heads[0].name}: {describe_run(run)}: {run['outcome']}")
    rescued = rescue_staged_results(project.containers(client, include_stopped=True), results_dir)
    for folder in rescued:
        print(f"results of a run cut short, kept from the work volume: {folder}")
    if heads:
        remove_staged(heads[0], [folder.name for folder in rescued])


def _stop(args: argparse.Namespace) -> int:
    client, project = docker_client(), _project(args)
    project.head(client)  # one line if there is no running head
    _stop_and_rescue(client, project, Path(args.results_dir))
    return 0


def _down(args: argparse.Namespace) -> int:
    client, project = docker_client(), _project(args)
    _stop_and_rescue(client, project, Path(args.results_dir))
    project.remove(client)
    print(f"project {project.name}: removed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fltest-deploy``."""
    parser = argparse.ArgumentParser(prog="fltest-deploy", description=__doc__)
    parser.add_argument("--compose-dir", default=str(COMPOSE_DIR), help="folder of docker-compose.yml and .env")
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build the base image (if missing), the wheelhouse and the FLTest image")
    build.add_argument(
        "--pip-source",
        choices=["wheelhouse", "pypi"],
        default="wheelhouse",
        help="where pip takes the wheels: ./wheelhouse, offline (default), or PyPI",
    )
    build.add_argument(
        "--base-image",
        help=f"e.g. python:{KIT.image_python}-slim-{KIT.debian_release} (default: build {KIT.base_image})",
    )
    build.add_argument(
        "--extras",
        default="",
        help="pyproject extras to add, e.g. torch: builds the variant <FLTEST_IMAGE>-torch (default: none)",
    )
    build.set_defaults(handler=_build)

    token = sub.add_parser("token", help="create the Ray token file if it is missing")
    token.set_defaults(handler=_token)

    for name, handler, text in [
        ("up", _up, "start (or restore) the cluster and wait until it is ready"),
        ("wait", _wait, "wait until Ray reports every node and CPU"),
    ]:
        command = sub.add_parser(name, help=text)
        command.add_argument("--timeout", type=float, default=180.0, help="seconds before failing (default 180)")
        if name == "up":
            command.add_argument("--workers", type=int, help="Ray workers (default: RAY_WORKERS)")
            command.add_argument(
                "--gpus-per-node",
                type=int,
                metavar="N",
                help="GPUs of the head and of each worker: Ray's --num-gpus and an NVIDIA device request "
                "per container (FLTEST_GPU_DEVICES=none: Ray's logical GPUs only); default: "
                "RAY_HEAD_GPUS, RAY_WORKER_GPUS",
            )
            command.add_argument(
                "--dashboard",
                action="store_true",
                help="also run the head's Ray dashboard, token-protected, on 127.0.0.1:RAY_DASHBOARD_PORT (compose/dashboard.yml)",
            )
        command.set_defaults(handler=handler)

    status = sub.add_parser("status", help="containers, their CPU limits and GPU devices, and what Ray reports")
    status.set_defaults(handler=_status)

    run = sub.add_parser("run", help="run `fltest run <config>` in the head; results land on the host")
    run.add_argument("config", help="the experiment config; its folder (hooks, a disk dataset) is staged in the head")
    run.add_argument("--results-dir", default="results", help="host folder for the results (default: results)")
    run.set_defaults(handler=_run)

    logs = sub.add_parser("logs", help="a node's container log and Ray logs (/tmp/ray/session_latest/logs)")
    logs.add_argument(
        "node",
        nargs="?",
        help="container name, service (ray-head, ray-worker) or name's end (ray-worker_1); default: every node",
    )
    logs.add_argument("--lines", type=int, default=40, help="last lines of each log (default 40)")
    logs.add_argument(
        "--file", action="append", help="a Ray log file to show instead of raylet/gcs_server (repeatable)"
    )
    logs.set_defaults(handler=_logs)

    stop = sub.add_parser("stop", help="stop the experiment running in the head (as Ctrl-C) and bring its results back")
    stop.add_argument(
        "--results-dir",
        default="results",
        help="host folder for the results of runs cut short, as <run id>/<experiment> (default: results)",
    )
    stop.set_defaults(handler=_stop)

    down = sub.add_parser(
        "down", help="stop a run still going on, then remove every container, network and volume of the kit"
    )
    down.add_argument(
        "--results-dir",
        default="results",
        help="host folder for results a run cut short left in the work volume (default: results)",
    )
    down.set_defaults(handler=_down)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 on success, 1 on a failure, 2 on bad input."""
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
