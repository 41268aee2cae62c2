"""``fltest-flower run``: ``fltest run`` in a one-off container of the SuperLink's network namespace.

The SuperLink's Control API listens on 127.0.0.1 of its own namespace only, so the operator's
``fltest run`` runs there, in the compose service ``operator`` (hardened as every container of
the project). It sees the host's files it needs at their own absolute paths: the config file
(its folder too if it names hooks or a model module), a disk data set and each deployment run's CA file
read-only, the results folder writable. It runs as the invoking user, in the invoking folder, so relative paths mean what
they mean on the host and the results belong to that user: nothing is left behind root-owned.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from deploy.flower_emulation.federation import OPERATOR_SERVICE, FlowerFederation
from fltest.config.runs import FlwrDeploymentRun
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError


def host_paths(config: ExperimentConfig, config_path: Path, cwd: Path) -> list[Path]:
    """The host files and folders ``fltest run`` reads for ``config`` (absolute; mounted read-only).

    A deployment run's CA file that does not exist is refused (one line naming the field).
    """
    paths = [config_path.resolve()]  # the file, not its folder: a key or CA folder beside it stays out of sight
    if config.hooks or config.model.module:  # imported from beside the config (and copied into the Flower App)
        paths.append(config_path.resolve().parent)
    if config.dataset.path is not None:
        paths.append(Path(config.dataset.path).resolve())
    for run in config.runs:
        if isinstance(run, FlwrDeploymentRun):
            path = (cwd / run.options.root_certificates.expanduser()).resolve()
            if not path.is_file():  # else Docker would create a root-owned folder there
                raise InputError(f"{config_path}: runs.{run.name}.options.root_certificates: {path}: no such file")
            paths.append(path)
    return paths


def operator_command(federation: FlowerFederation, config_path: Path, results_dir: Path, mounts: list[Path],
                     cwd: Path) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The ``compose run`` command of ``fltest run`` in the operator container, and its environment."""
    volumes = [arg for path in dict.fromkeys(mounts) for arg in ("--volume", f"{path}:{path}:ro")]
    args = ["run", "--rm", "--no-deps", "-T", "--user", f"{os.getuid()}:{os.getgid()}", "--workdir", str(cwd),
            *volumes, "--volume", f"{results_dir}:{results_dir}", OPERATOR_SERVICE,
            "fltest", "run", str(config_path.resolve()), "--results-dir", str(results_dir)]  # fmt: skip
    return federation.compose_command(*args)


def run_in_namespace(federation: FlowerFederation, config_path: Path, results_dir: Path | None) -> int:
    """Run ``fltest run <config_path>`` next to the SuperLink; its exit code (its output goes to ours).

    ``results_dir`` defaults to the config's ``output.dir``; it is created here, as the invoking
    user, before the container mounts it.
    """
    from fltest.validate import check_config

    cwd = Path.cwd()
    if cwd == Path("/"):
        raise InputError("fltest-flower run: run it from a folder other than / (relative paths are taken against it)")
    config = check_config(config_path)  # bad input (the data too) fails here, before any container
    mounts = host_paths(config, config_path, cwd)
    results = (cwd / (results_dir or Path(config.output.dir)).expanduser()).resolve()
    results.mkdir(parents=True, exist_ok=True)
    command, env = operator_command(federation, config_path, results, mounts, cwd)
    return subprocess.run(command, cwd=federation.directory, env=env).returncode
