"""Read an experiment config from YAML and report the first problem as one line."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import ValidationError

from fltest.config.partitions import describe_partition_error, without_partition_method
from fltest.config.runs import FlwrDeploymentRun, describe_run_error, without_run_kind
from fltest.config.schema import ExperimentConfig
from fltest.errors import FieldError, InputError
from fltest.hooks import load_hooks


def _format_validation_error(path: Path, error: ValidationError, raw: dict) -> str:
    """Turn pydantic's first error into ``<file>: <field.path>: <message>``."""
    first = error.errors()[0]
    described = describe_run_error(first, raw.get("runs")) or describe_partition_error(first)
    if described:
        return f"{path}: {described}"
    location = [str(part) for part in without_partition_method(without_run_kind(first["loc"]))]
    message = first["msg"].removeprefix("Value error, ")
    field, sep, rest = message.partition(": ")
    if sep and " " not in field:
        location.append(field)
        message = rest
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    where = ".".join(location) or "(top level)"
    return f"{path}: {where}: {message}"


def load_config(path: str | Path) -> ExperimentConfig:
    """Load and validate the config at ``path``: its YAML, its schema, its paths and its hooks module.

    Relative ``dataset.path`` and deployment runs' ``root_certificates`` are taken relative to the
    config file (``~`` is this user's home), whose folder is also put on ``sys.path`` so that a hooks
    module beside it imports.
    The data is not read here: :func:`fltest.validate.check_config` checks it too, and a
    run checks it as it prepares the shards. Raises :class:`InputError` naming the file
    and field on any problem.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read config: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise InputError(f"{path}: not valid YAML{where}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: the config must be a YAML mapping")
    try:
        config = ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise InputError(_format_validation_error(path, exc, raw)) from None

    config_dir = path.resolve().parent
    config = _with_root_certificates_resolved(config, config_dir)
    if config.dataset.path is not None:
        data_path = config.dataset.path
        if not data_path.is_absolute():
            data_path = config_dir / data_path
        if not data_path.is_dir():
            raise InputError(f"{path}: dataset.path: folder not found: {data_path}")
        config = config.model_copy(update={"dataset": config.dataset.model_copy(update={"path": data_path})})
    if str(config_dir) not in sys.path:
        sys.path.insert(0, str(config_dir))
    from fltest.model.load import check_strategy, load_model  # here: fltest.model imports the config's types

    try:
        load_hooks(config.hooks)
        check_strategy(
            load_model(config.model), config.training.strategy
        )  # a user's model module: imported and checked here
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    return config


def config_path(path: Path, config_dir: Path, home: Path | None = None) -> Path:
    """A path a config names, as fltest reads it: ``~`` is ``home`` (this user's), a relative path is the config's folder's."""
    if path.parts[:1] == ("~",):
        path = (home or Path.home()).joinpath(*path.parts[1:])
    return path if path.is_absolute() else config_dir / path


def _with_root_certificates_resolved(config: ExperimentConfig, config_dir: Path) -> ExperimentConfig:
    """``config`` with every deployment run's ``root_certificates`` made absolute (:func:`config_path`)."""
    runs = [
        run.model_copy(
            update={
                "options": run.options.model_copy(
                    update={"root_certificates": config_path(run.options.root_certificates, config_dir)}
                )
            }
        )
        if isinstance(run, FlwrDeploymentRun)
        else run
        for run in config.runs
    ]
    return config.model_copy(update={"runs": runs})


@contextlib.contextmanager
def naming_the_file(path: str | Path) -> Iterator[None]:
    """Put ``<path>: `` in front of a :class:`FieldError` raised inside: the data code names the field, this the file."""
    try:
        yield
    except FieldError as exc:
        raise FieldError(f"{path}: {exc}") from None
