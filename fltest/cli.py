"""The ``fltest`` command line: validate, prepare, run and report."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from fltest import __version__
from fltest.command_line import run_command

log = logging.getLogger("fltest")
CONFIG_HELP = "the experiment config (YAML)"


def _validate(args: argparse.Namespace) -> int:
    from fltest.backends.registry import backend_for
    from fltest.config.loader import naming_the_file
    from fltest.validate import check_config

    config = check_config(args.config)
    with naming_the_file(args.config):  # a field a backend's check refuses (total_gpus on a joined cluster)
        for run in config.runs:
            backend_for(run).check(config, run)
    print(f"{args.config}: valid ({len(config.runs)} runs, {config.clients} clients, {config.training.rounds} rounds)")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from fltest.backends.registry import backend_for
    from fltest.config.loader import load_config, naming_the_file
    from fltest.runner import prepare

    config = load_config(args.config)
    storages = {args.storage} if args.storage else {backend_for(r).storage(config) for r in config.runs}
    with naming_the_file(args.config):
        for storage in sorted(storages):
            prepare(config, storage)
    return 0


def _partitions(args: argparse.Namespace) -> int:
    from fltest.backends.flwr_deployment.node_data import export_partition
    from fltest.config.loader import load_config, naming_the_file
    from fltest.runner import prepare

    config = load_config(args.config)
    with naming_the_file(args.config):
        shards = prepare(config)
    out = Path(args.out)
    for partition_id in range(shards.num_clients):
        export_partition(shards, partition_id, out / f"partition-{partition_id}")
    print(f"{out}: partition-0 .. partition-{shards.num_clients - 1} of shard set {shards.key}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from fltest.config.loader import load_config, naming_the_file
    from fltest.results.cluster_hint import cluster_hint
    from fltest.results.table import format_table
    from fltest.runner import run_experiment

    config = load_config(args.config)
    results_dir = Path(args.results_dir) if args.results_dir else config.output.dir
    with naming_the_file(args.config):  # the data is checked as the shards are prepared
        comparison = run_experiment(config, results_dir)
    print(format_table(comparison))
    print(f"results: {results_dir / config.name}")
    for run in config.runs:
        hint = cluster_hint(results_dir / config.name / run.name, config)
        if hint:
            print(hint)
    return 0 if all(r["status"] in ("completed", "unsupported") for r in comparison["runs"]) else 1


def _report(args: argparse.Namespace) -> int:
    from fltest.results.report import plot_report

    print(plot_report(Path(args.results_dir), Path(args.output) if args.output else None))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``fltest`` command."""
    parser = argparse.ArgumentParser(prog="fltest", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fltest {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check a config and exit")
    validate.add_argument("config", help=CONFIG_HELP)
    validate.set_defaults(handler=_validate)

    prepare = sub.add_parser("prepare", help="prepare and cache the data shards ahead of a run")
    prepare.add_argument("config", help=CONFIG_HELP)
    prepare.add_argument("--storage", choices=["mmap", "memory"], help="only this shard variant")
    prepare.set_defaults(handler=_prepare)

    partitions = sub.add_parser(
        "partitions", help="export one folder per client for Flower SuperNodes (mode: deployment)"
    )
    partitions.add_argument("config", help=CONFIG_HELP)
    partitions.add_argument("--out", required=True, help="folder that receives partition-<i>/ (replaced if present)")
    partitions.set_defaults(handler=_partitions)

    run = sub.add_parser("run", help="run every run of a config and compare them")
    run.add_argument("config", help=CONFIG_HELP)
    run.add_argument("--results-dir", help="results root (default: the config's output.dir)")
    run.set_defaults(handler=_run)

    report = sub.add_parser("report", help="plot accuracy and loss per round of a results folder")
    report.add_argument("results_dir", help="results/<experiment>")
    report.add_argument("-o", "--output", help="PNG path (default: <results_dir>/report.png)")
    report.set_defaults(handler=_report)
    return parser


def _logging(args: argparse.Namespace) -> None:
    """Libraries log warnings only; fltest's own progress lines are shown (debug with ``-v``)."""
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if args.verbose else "%(message)s",
        stream=sys.stderr,
    )
    log.setLevel(logging.DEBUG if args.verbose else logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns 0 on success, 1 when a run failed, 2 on bad input."""
    return run_command(build_parser(), argv, setup=_logging)


if __name__ == "__main__":
    sys.exit(main())
