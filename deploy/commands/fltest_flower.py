"""The Flower deployment emulation: keys, TLS, partitions, SuperLink, SuperNodes (also ``python -m deploy.commands.fltest_flower``).

The SuperLink's Control API is reachable only inside its own network namespace: ``list``,
``register`` and ``unregister`` run ``flwr`` in the SuperLink's container, ``run`` runs
``fltest run`` in a one-off container there, ``flwr`` the operator's flwr (any Flower App), and
``files`` copies what the Apps wrote in their working folders to the host.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.compose import COMPOSE_DIR
from deploy.engine import docker_client
from deploy.flower_emulation.federation import SUPERLINK_SERVICE, FlowerFederation, supernode_name
from fltest.command_line import run_command
from fltest.errors import FLTestError, RunFailed


def _federation(args: argparse.Namespace) -> FlowerFederation:
    overrides = {"FLOWER_SUPERNODES": str(args.supernodes)} if args.supernodes is not None else {}
    return FlowerFederation(directory=Path(args.compose_dir), overrides=overrides)


def _nodes(federation: FlowerFederation) -> list[str]:
    return [supernode_name(i) for i in range(federation.supernodes())]


def _keys(args: argparse.Namespace) -> int:
    federation = _federation(args)
    federation.ensure_keys(_nodes(federation))
    print(f"{federation.keys_dir}: one key pair per SuperNode ({', '.join(_nodes(federation))})")
    return 0


def _tls(args: argparse.Namespace) -> int:
    files = _federation(args).tls()
    print(f"root certificate for SuperNodes and the flwr CLI: {files.ca_cert}")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from fltest.config.loader import load_config, naming_the_file
    from fltest.runner import prepare

    federation, config = _federation(args), load_config(args.config)
    with naming_the_file(args.config):
        shards = prepare(config)
    federation.export_partitions(shards, _nodes(federation))
    print(f"{federation.path('FLOWER_DATA_DIR')}: one partition per SuperNode")
    return 0


def _up(args: argparse.Namespace) -> int:

    federation = _federation(args)
    client = federation.client = docker_client()
    nodes = _nodes(federation)
    federation.tls()
    federation.ensure_keys(nodes)
    federation.write_supernodes({node: i for i, node in enumerate(nodes)}, len(nodes))
    federation.up_superlink()
    federation.wait_superlink(client, args.timeout)
    known = federation.known_node_ids()  # a SuperLink that lost its state knows no key: register again
    federation.save_node_ids({**known, **{node: federation.register(node) for node in nodes if node not in known}})
    federation.up(*nodes)
    federation.wait_online([federation.node_ids()[node] for node in nodes], args.timeout)
    print(f"SuperLink {federation.address} in its own namespace (fltest-flower run <config>); {len(nodes)} SuperNodes")
    return 0


def _register(args: argparse.Namespace) -> int:
    print(_federation(args).register(args.node))
    return 0


def _list(args: argparse.Namespace) -> int:
    """Print the SuperNodes the SuperLink knows, then its Flower runs (``run <id> ...``: fltest's and any other App's);
    exit 1 if it knows no SuperNode, or not the ones ``up`` registered."""
    from deploy.flower_emulation.runs import describe_flower_run, flower_runs

    federation = _federation(args)
    names = {node_id: name for name, node_id in federation.node_ids().items()}
    nodes = federation.registered()
    for node in nodes:
        print(f"{node['node-id']:>20}  {node['status']:12}  {names.get(int(node['node-id']), '-')}")
    for run in flower_runs(federation):
        print(describe_flower_run(run))
    lost = sorted(set(federation.node_ids()) - set(federation.known_node_ids(nodes)))
    if not nodes:
        raise FLTestError(
            f"SuperLink of project {federation.name}: knows no SuperNode (state lost? fltest-flower up registers the keys again)"
        )
    if lost:
        raise FLTestError(
            f"SuperLink of project {federation.name}: does not know {', '.join(lost)} (state lost? fltest-flower up registers them again)"
        )
    return 0


def _unregister(args: argparse.Namespace) -> int:
    _federation(args).unregister(args.node_id)
    print(f"node {args.node_id}: unregistered")
    return 0


def _run(args: argparse.Namespace) -> int:
    from deploy.flower_emulation.run_in_namespace import run_in_namespace

    return run_in_namespace(_federation(args), Path(args.config), Path(args.results_dir) if args.results_dir else None)


HELP_FLAG = "--help"  # flwr's (typer's) only help option


def _flwr(args: argparse.Namespace) -> int:
    from deploy.flower_emulation.flwr_in_namespace import flwr_in_namespace

    if not args.flwr_args or HELP_FLAG in args.flwr_args:
        # flwr's help needs no federation: the same flwr (the pinned version) answers on the host.
        return subprocess.run([str(Path(sys.executable).with_name("flwr")), *args.flwr_args]).returncode
    return flwr_in_namespace(_federation(args), args.flwr_args)


def _files(args: argparse.Namespace) -> int:
    from deploy.flower_emulation.app_files import fetch_app_files

    for copied in fetch_app_files(_federation(args), Path(args.out).resolve()):
        print(copied)
    return 0


def _stop_runs(federation: FlowerFederation, restart: bool = True) -> None:
    """Stop the experiments and the operator's flwr commands running next to the SuperLink (as Ctrl-C), then every
    Flower run still unfinished on it (fltest's and any other App's); with ``restart``, restart the SuperNodes after
    a stop (see :func:`deploy.flower_emulation.runs.restart_supernodes`)."""
    from deploy.flower_emulation.federation import FLWR_SERVICE, OPERATOR_SERVICE
    from deploy.flower_emulation.runs import (
        describe_operator,
        restart_supernodes,
        running_operators,
        stop_flower_runs,
        stop_operator,
        unfinished_flower_runs,
    )

    operators = running_operators(federation, OPERATOR_SERVICE) + running_operators(federation, FLWR_SERVICE)
    for container in operators:
        print(f"{describe_operator(container)}: {stop_operator(container)}")
    if not federation.containers(federation.docker(), SUPERLINK_SERVICE):
        return  # no SuperLink runs: no Flower run goes on
    try:
        stopped = stop_flower_runs(federation, unfinished_flower_runs(federation))
    except RunFailed as exc:  # a SuperLink that does not answer: down goes on and removes it
        print(f"Flower runs not stopped: {exc}")
        return
    for run_id in stopped:
        print(f"Flower run {run_id}: stopped (flwr stop)")
    if restart and (
        operators or stopped
    ):  # a SuperNode receiving as its run stopped answers one message late from then on
        print(f"SuperNodes restarted and online again: {', '.join(restart_supernodes(federation))}")


def _stop(args: argparse.Namespace) -> int:
    _stop_runs(_federation(args))
    return 0


def _down(args: argparse.Namespace) -> int:
    federation = _federation(args)
    _stop_runs(federation, restart=False)  # they are removed next
    federation.remove(federation.docker())
    print(f"project {federation.name}: removed (keys and partitions kept)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m deploy.commands.fltest_flower``."""
    parser = argparse.ArgumentParser(prog="fltest-flower", description=__doc__)
    parser.add_argument("--compose-dir", default=str(COMPOSE_DIR), help="folder of flower.yml and flower.env")
    parser.add_argument("--supernodes", type=int, help="SuperNodes (default: FLOWER_SUPERNODES)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tls", help="create the CA and the SuperLink certificate if missing").set_defaults(handler=_tls)
    sub.add_parser("keys", help="create a key pair per SuperNode if missing").set_defaults(handler=_keys)
    prepare = sub.add_parser("prepare", help="export one partition of the experiment per SuperNode")
    prepare.add_argument("config", help="the experiment config; its clients must equal the SuperNodes")
    prepare.set_defaults(handler=_prepare)
    up = sub.add_parser("up", help="TLS, keys, SuperLink, registration, SuperNodes; wait until online")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait until every SuperNode is online")
    up.set_defaults(handler=_up)
    register = sub.add_parser("register", help="register a SuperNode's public key; prints its node id")
    register.add_argument("node", help="e.g. supernode-0")
    register.set_defaults(handler=_register)
    sub.add_parser("list", help="the SuperNodes the SuperLink knows, then its Flower runs").set_defaults(handler=_list)
    unregister = sub.add_parser("unregister", help="remove a SuperNode from the SuperLink")
    unregister.add_argument("node_id", type=int, help="the node id that register or list printed")
    unregister.set_defaults(handler=_unregister)
    run = sub.add_parser(
        "run", help="fltest run <config> next to the SuperLink (its deployment runs: superlink 127.0.0.1:9443)"
    )
    run.add_argument("config", help="the experiment config (YAML)")
    run.add_argument("--results-dir", help="default: the config's output.dir")
    run.set_defaults(handler=_run)
    # Every argument after `flwr` is flwr's, even one starting with a dash (no prefix character of its own).
    flwr = sub.add_parser(
        "flwr",
        add_help=False,
        prefix_chars="\0",
        help="flwr <args> next to the SuperLink, in this folder (connection fltest): flwr run . fltest --stream",
    )
    flwr.add_argument(
        "flwr_args", nargs=argparse.REMAINDER, help="flwr's own arguments, passed on as they are (--help too)"
    )
    flwr.set_defaults(handler=_flwr)
    files = sub.add_parser("files", help="copy what Flower Apps wrote in their working folders to <out>/<service>/")
    files.add_argument("--out", default="app-files", help="host folder (default: app-files)")
    files.set_defaults(handler=_files)
    sub.add_parser(
        "stop",
        help="stop what runs next to the SuperLink (as Ctrl-C: fltest run, flwr) and every unfinished Flower run",
    ).set_defaults(handler=_stop)
    sub.add_parser("down", help="stop what runs, then remove the containers, network and volumes").set_defaults(
        handler=_down
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 on success, 1 on a failure, 2 on bad input."""
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
