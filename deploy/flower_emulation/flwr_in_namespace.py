"""``fltest-flower flwr <flwr args>``: the operator's ``flwr`` in a one-off container of the SuperLink's network namespace.

The SuperLink's Control API answers on 127.0.0.1 of its own namespace only, so the operator's ``flwr``
runs there, in the compose service ``flwr`` (hardened as every container of the project, the CA
read-only), through :mod:`deploy.node.superlink_flwr`: the connection ``fltest`` (the default) is the
kit's SuperLink, and a local App whose dependencies the image lacks is refused in one line. It runs as
the invoking user, in the invoking folder, which it sees at its own path and may write, as ``flwr`` may
in a Flower user's folder (a ``flwr build``'s FAB; the migration of a ``pyproject.toml`` that still
names ``[tool.flwr.federations]``); nothing else of the host. Its output is flwr's own.

Ctrl-C or SIGTERM stops what the command started: ``flwr`` itself only stops following a streamed run,
so the container gets SIGINT (compose runs in a session of its own) and the Flower run it submitted (the
id flwr printed) is stopped with ``flwr stop`` in the SuperLink's container.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from deploy.flower_emulation.federation import FLWR_SERVICE, HOLDER_SERVICE, FlowerFederation, one_off_run
from deploy.flower_emulation.runs import (
    COMPOSE_END_WAIT_S,
    OPERATOR_FLWR,
    container_of,
    restart_supernodes,
    stop_flower_runs,
    stop_operator,
)
from deploy.kit import KIT
from deploy.node.superlink_flwr import IMAGE_ENV
from fltest.errors import FLTestError, InputError, RunFailed

RUN_ID = re.compile(
    rb'Successfully started run (\d+)|"run-id": "(\d+)"'
)  # flwr run's line, or its --format json answer
IMAGE_PATHS = (
    "/opt/fltest",
    "/usr",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/run/secrets",
    KIT.home,
)  # nor in them
SCRATCH = "/tmp"  # the container's tmpfs (its FLWR_HOME): a folder in it may be mounted there, not it


def flwr_command(
    federation: FlowerFederation, name: str, args: list[str], cwd: Path
) -> tuple[list[str], dict[str, str]]:
    """The ``compose run`` command of ``flwr <args>`` in the one-off container ``name``, as this user in ``cwd``, and its environment."""
    image = federation.setting("FLTEST_IMAGE") or ""
    return federation.compose_command(
        *one_off_run(name, cwd),
        "--volume",
        f"{cwd}:{cwd}",
        "-e",
        f"{IMAGE_ENV}={image}",
        FLWR_SERVICE,
        *OPERATOR_FLWR,
        *args,
    )


def check_folder(cwd: Path) -> None:
    """Refuse a folder that, mounted at its own path, would hide part of the image (``/``, ``/usr/lib``, ``/tmp``...)."""
    hidden = [
        path for path in IMAGE_PATHS if Path(path) == cwd or cwd in Path(path).parents or Path(path) in cwd.parents
    ]
    hidden += [SCRATCH] if cwd == Path(SCRATCH) or cwd in Path(SCRATCH).parents else []
    if hidden:
        raise InputError(
            f"fltest-flower flwr: run it from your App's folder, not {cwd} (mounted at its own path in the "
            f"container, it would hide {hidden[0]})"
        )


def copy_noting_run_ids(source: BinaryIO, target: BinaryIO, run_ids: list[int]) -> None:
    """Copy ``source`` to ``target`` line by line as it comes, appending to ``run_ids`` each Flower run id flwr says it started."""
    for line in iter(source.readline, b""):
        found = RUN_ID.search(line)
        if found:
            run_ids.append(int(found.group(1) or found.group(2)))
        try:
            target.write(line)
            target.flush()
        except OSError:  # our output closed (a pager quit): flwr's output is still read, for its run ids
            pass


def flwr_in_namespace(federation: FlowerFederation, args: list[str]) -> int:
    """Run ``flwr <args>`` next to the SuperLink, in this folder; flwr's exit code (2: its App refused).

    On Ctrl-C or SIGTERM the container is stopped (SIGINT), then the Flower run it started, if any.
    """
    cwd = Path.cwd()
    check_folder(cwd)
    ca = federation.path("FLOWER_TLS_DIR") / "superlink" / "ca.crt"
    if not ca.is_file():  # else Docker would create a root-owned folder there
        raise FLTestError(f"{ca}: no CA certificate: start the federation first (fltest-flower up)")
    if not federation.containers(federation.docker(), HOLDER_SERVICE):
        raise FLTestError(
            f"project {federation.name}: no running {HOLDER_SERVICE} container, whose namespace flwr joins (fltest-flower up)"
        )
    name = f"{federation.name}-{FLWR_SERVICE}-{time.strftime('%Y%m%d-%H%M%S')}"
    command, env = flwr_command(federation, name, args, cwd)
    compose = subprocess.Popen(
        command, cwd=federation.directory, env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    run_ids: list[int] = []
    copier = threading.Thread(
        target=copy_noting_run_ids, args=(compose.stdout, sys.stdout.buffer, run_ids), daemon=True
    )
    copier.start()
    try:
        code = compose.wait()
        copier.join()
        return code
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM here: stop the container, then the run it started
        container = container_of(federation, name, compose)
        outcome = stop_operator(container) if container is not None else "had ended"
        try:
            compose.wait(COMPOSE_END_WAIT_S)
        except subprocess.TimeoutExpired:
            compose.kill()
        copier.join(COMPOSE_END_WAIT_S)
        interrupt.stopped = f"flwr in {name} {outcome}{_stop_runs_started(federation, run_ids)}"
        raise


def _stop_runs_started(federation: FlowerFederation, run_ids: list[int]) -> str:
    """``flwr stop`` each of the Flower runs the command started that is unfinished; what was done, for the last line."""
    try:
        stopped = stop_flower_runs(federation, run_ids)
    except RunFailed as exc:  # a SuperLink that does not answer
        return "".join(f"; Flower run {run_id} not stopped ({exc})" for run_id in run_ids)
    restarted = (
        restart_supernodes(federation) if stopped else []
    )  # a SuperNode receiving as its run stopped answers late
    return "".join(
        [f"; Flower run {run_id} stopped (flwr stop)" for run_id in stopped]
        + [f"; Flower run {run_id} had finished" for run_id in run_ids if run_id not in stopped]
        + ([f"; SuperNodes restarted ({len(restarted)})"] if restarted else [])
    )
