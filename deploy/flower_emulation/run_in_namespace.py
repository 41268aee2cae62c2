"""``fltest-flower run``: ``fltest run`` in a one-off container of the SuperLink's network namespace.

The SuperLink's Control API listens on 127.0.0.1 of its own namespace only, so the operator's
``fltest run`` runs there, in the compose service ``operator`` (hardened as every container of
the project). It sees the host's files it needs at their own absolute paths: the config file
(its folder too if it names hooks or a model module), a disk data set and each deployment run's CA file
(where fltest there resolves the config's path to it) read-only, the results folder and the user's Hugging
Face datasets cache writable. It runs as the invoking user, in the invoking folder, so relative paths mean
what they mean on the host and the results belong to that user: nothing is left behind root-owned.

The datasets cache holds FLTest's shard sets: the one ``fltest-flower prepare <config>`` made for the
SuperNodes is the one the operator's ``fltest run`` reuses, and the host's check of the config skips
reading the data when it is there (it was checked when the set was prepared). Preparing the set in the
container again, and reading the data twice, cost 3 to 4 s of every run's start (bench/bare_apps.py).

Ctrl-C or SIGTERM on ``fltest-flower run`` stops the run where it runs: SIGINT to the operator
container, whose fltest stops its Flower run on the SuperLink and records the rounds so far
(:mod:`deploy.flower_emulation.runs`); compose runs in a session of its own, so the terminal's
Ctrl-C reaches only this process, which does the stopping.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import yaml

from deploy.flower_emulation.federation import OPERATOR_SERVICE, FlowerFederation, one_off_run
from deploy.flower_emulation.runs import (
    COMPOSE_END_WAIT_S,
    container_of,
    flower_runs_of,
    refuse_if_running,
    restart_supernodes,
    stop_flower_runs,
    stop_operator,
)
from fltest.config.loader import config_path as resolve_config_path
from fltest.config.runs import FlwrDeploymentRun
from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import cache_root
from fltest.errors import InputError


def host_paths(config: ExperimentConfig, config_path: Path, home: str) -> dict[Path, Path]:
    """The host files and folders ``fltest run`` reads for ``config``, each at the path fltest in the container reads it.

    Mounted read-only. A deployment run's CA file is mounted where fltest in the operator container
    resolves the config's ``root_certificates``: ``~`` is ``home``, the container's home. A CA file
    that does not exist is refused (one line naming the field).
    """
    paths = {
        config_path.resolve(): config_path.resolve()
    }  # the file, not its folder: a key or CA folder beside it stays out of sight
    if config.hooks or config.model.module:  # imported from beside the config (and copied into the Flower App)
        paths[config_path.resolve().parent] = config_path.resolve().parent
    if config.dataset.path is not None:
        paths[Path(config.dataset.path).resolve()] = Path(config.dataset.path).resolve()
    written = {run["name"]: run for run in yaml.safe_load(config_path.read_text())["runs"]}
    for run in config.runs:
        if isinstance(run, FlwrDeploymentRun):
            path = run.options.root_certificates.resolve()  # the loader made it absolute, as on this host
            if not path.is_file():  # else Docker would create a root-owned folder there
                raise InputError(f"{config_path}: runs.{run.name}.options.root_certificates: {path}: no such file")
            as_written = Path(written[run.name]["options"]["root_certificates"])
            paths[path] = resolve_config_path(as_written, config_path.resolve().parent, Path(home))
    return paths


def datasets_cache() -> Path:
    """This user's Hugging Face datasets cache, which holds FLTest's shard sets (absolute; created, as this user)."""
    folder = cache_root().parent
    folder.mkdir(parents=True, exist_ok=True)  # else Docker would create a root-owned folder there
    return folder


def operator_command(
    federation: FlowerFederation,
    name: str,
    config_path: Path,
    results_dir: Path,
    mounts: dict[Path, Path],
    cwd: Path,
    cache: Path,
) -> tuple[list[str], dict[str, str]]:
    """The ``compose run`` command of ``fltest run`` in the operator container ``name``, and its environment.

    ``mounts``: host path -> the path it is mounted at, read-only; ``results_dir`` and the datasets cache
    ``cache`` are mounted writable at their own paths.
    """
    volumes = [arg for host, target in mounts.items() for arg in ("--volume", f"{host}:{target}:ro")]
    args = [
        *one_off_run(name, cwd),
        *volumes,
        "--volume",
        f"{results_dir}:{results_dir}",
        "--volume",
        f"{cache}:{cache}",
        "-e",  # compose 1.29's run has no --env
        f"HF_DATASETS_CACHE={cache}",
        OPERATOR_SERVICE,
        "fltest",
        "run",
        str(config_path.resolve()),
        "--results-dir",
        str(results_dir),
    ]
    return federation.compose_command(*args)


def run_in_namespace(federation: FlowerFederation, config_path: Path, results_dir: Path | None) -> int:
    """Run ``fltest run <config_path>`` next to the SuperLink; its exit code (its output goes to ours).

    ``results_dir`` defaults to the config's ``output.dir``; it is created here, as the invoking
    user, before the container mounts it. An experiment still running there refuses this one.
    """
    from fltest.validate import check_config

    cwd = Path.cwd()
    if cwd == Path("/"):
        raise InputError("fltest-flower run: run it from a folder other than / (relative paths are taken against it)")
    config = check_config(config_path, reuse_shards=True)  # bad input (the data too) fails here, before any container
    mounts = host_paths(config, config_path, federation.hardening()["environment"]["HOME"])
    results = (cwd / (results_dir or Path(config.output.dir)).expanduser()).resolve()
    refuse_if_running(federation)
    results.mkdir(parents=True, exist_ok=True)
    name = f"{federation.name}-{OPERATOR_SERVICE}-{time.strftime('%Y%m%d-%H%M%S')}"
    command, env = operator_command(federation, name, config_path, results, mounts, cwd, datasets_cache())
    compose = subprocess.Popen(command, cwd=federation.directory, env=env, start_new_session=True)
    try:
        return compose.wait()
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM here: stop the run where it runs
        container = container_of(federation, name, compose)
        outcome = stop_operator(container) if container is not None else "had ended"
        try:
            compose.wait(COMPOSE_END_WAIT_S)
        except subprocess.TimeoutExpired:
            compose.kill()
        left = stop_flower_runs(federation, flower_runs_of(config, results))
        restarted = restart_supernodes(federation)
        runs = f"; Flower runs {', '.join(map(str, left))} left running, stopped with flwr stop" if left else ""
        interrupt.stopped = (
            f"fltest run in {name} {outcome}{runs}; SuperNodes restarted ({len(restarted)}); "
            f"its rounds so far and summary: {results / config.name}"
        )
        raise
