"""Plant small bugs in code the docs describe, one at a time, and run the tests that cover each: is it caught?

``python -m tests.tools.plant_bugs [--only NAME ...]`` copies the checkout's files (what git lists) to a
temporary folder for each bug, changes one line there, and runs the bug's covering tests in that copy
(``PYTHONPATH`` puts the copy's packages first, for the ``fltest`` commands the tests start too). A bug is
caught when those tests fail. Before any bug it runs the covering tests on the unchanged copy: they must
pass, or a "catch" would mean nothing. Prints one line a bug and ``N of M caught``; exits 1 if any survived.

Each bug is one a test once missed (issue 40's list): keep it here, so that a test weakened later shows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.tools.checkout import copy_checkout

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Bug:
    """One planted bug: in ``path``, the text ``old`` becomes ``new``; ``tests`` are the pytest ids that cover it."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BUGS = (
    Bug(
        "a hub revision allowed for every source",
        "fltest/config/schema.py",
        'if self.source != "hub" and (self.name or self.revision):',
        'if self.source != "hub" and self.name:',
        ("tests/test_config.py::test_bad_config_names_the_field",),
    ),
    Bug(
        "no min_samples_per_client floor after the draw",
        "fltest/data/partition.py",
        "    if smallest < config.min_samples_per_client:",
        "    if False:",
        ("tests/test_partition.py::test_min_samples_per_client_is_a_floor_for_every_method",),
    ),
    Bug(
        "FedYogi without sign(v - delta^2)",
        "fltest/server_update.py",
        "return previous - one_minus_beta_2 * squared * np.sign(previous - squared)",
        "return previous + one_minus_beta_2 * squared",
        ("tests/test_strategies.py",),
    ),
    Bug(
        "the time against the reference inverted",
        "fltest/results/compare.py",
        'summary["wall_s"] / reference["wall_s"]',
        'reference["wall_s"] / summary["wall_s"]',
        ("tests/test_report.py",),
    ),
    Bug(
        "an early end recorded as completed",
        "fltest/results/recorder.py",
        'if status == "completed" and self.last_round != self.rounds:',
        "if False:",
        ("tests/test_recorder.py",),
    ),
    Bug(
        "after_local_training given (new, old)",
        "fltest/fedavg.py",
        "hooks.after_local_training(partition_id, server_round, params, trained)",
        "hooks.after_local_training(partition_id, server_round, trained, params)",
        ("tests/test_reference.py",),
    ),
    Bug(
        "--results-dir ignored",
        "fltest/cli.py",
        "results_dir = Path(args.results_dir) if args.results_dir else config.output.dir",
        "results_dir = config.output.dir",
        ("tests/test_user_folder.py::test_results_dir_moves_the_results_root",),
    ),
    Bug(
        "a train of other shapes accepted",
        "fltest/model/load.py",
        "    if shapes != [p.shape for p in given]:",
        "    if shapes is None:",
        ("tests/test_model_module.py::test_a_train_returning_other_shapes_fails_the_run_naming_them",),
    ),
    Bug(
        "a plain docker build without the kit's user",
        "images/fltest/Dockerfile",
        "ARG FLTEST_UID=10001\n",
        "ARG FLTEST_UID\n",
        ("tests/test_deploy.py::test_a_plain_docker_build_gets_the_arguments_fltest_deploy_passes",),
    ),
)


def covering_tests_fail(copy: Path, tests: tuple[str, ...]) -> bool:
    """Whether the tests fail in ``copy`` (its packages first on the path, for the commands the tests start too)."""
    environment = {**os.environ, "PYTHONPATH": str(copy)}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    return subprocess.run(command, cwd=copy, env=environment, capture_output=True).returncode != 0


def plant(bug: Bug) -> tuple[bool, float]:
    """Plant ``bug`` in a fresh copy and run its tests; (caught, seconds). Raises if its tests fail without it."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fltest-planted-") as folder:
        copy = copy_checkout(Path(folder))
        if covering_tests_fail(copy, bug.tests):
            raise SystemExit(f"{bug.name}: its tests fail with no bug planted: {' '.join(bug.tests)}")
        target = copy / bug.path
        text = target.read_text()
        if text.count(bug.old) != 1:
            raise SystemExit(f"{bug.name}: {bug.path} holds {bug.old!r} {text.count(bug.old)} times, not once")
        target.write_text(text.replace(bug.old, bug.new))
        caught = covering_tests_fail(copy, bug.tests)
    return caught, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    """Plant every bug (or those named by ``--only``), print a line each and the count; 1 if one survived."""
    parser = argparse.ArgumentParser(prog="python -m tests.tools.plant_bugs", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="plant only the bugs whose names contain these words")
    args = parser.parse_args(argv)
    bugs = [bug for bug in BUGS if not args.only or any(word in bug.name for word in args.only)]
    caught = 0
    for bug in bugs:
        was_caught, seconds = plant(bug)
        caught += was_caught
        print(f"{'caught  ' if was_caught else 'SURVIVED'} {bug.name} ({bug.path}; {seconds:.0f} s)", flush=True)
    print(f"{caught} of {len(bugs)} caught")
    return 0 if caught == len(bugs) else 1


if __name__ == "__main__":
    sys.exit(main())
