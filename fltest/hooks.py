"""User client hooks: optional functions in a module named by the config's ``hooks``.

A hooks module may define any of these functions (all optional):

``before_local_training(partition_id, server_round, features, labels)``
    Called on the client before local training. Return ``None`` to train on the
    shard as it is, or a ``(features, labels)`` pair to train on instead.

``after_local_training(partition_id, server_round, old_params, new_params)``
    Called on the client after local training. Return a ``dict[str, float]`` of extra
    client metrics; they are averaged over clients (weighted by examples) per round.

``evaluate_metrics(labels, probabilities)``
    Called on the server after every round with the test labels and the global
    model's class probabilities. Return a ``dict[str, float]`` of extra test metrics.

Hooks must be deterministic for the backends to agree with the reference backend.
"""

from __future__ import annotations

import importlib
import importlib.util
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from fltest.errors import InputError

Params = list[np.ndarray]
Metrics = dict[str, float]


@dataclass(frozen=True)
class Hooks:
    """The hook functions a module defines; missing ones are ``None``."""

    before_local_training: Callable[[int, int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None] | None = None
    after_local_training: Callable[[int, int, Params, Params], Metrics | None] | None = None
    evaluate_metrics: Callable[[np.ndarray, np.ndarray], Metrics] | None = None


def _import_failure(module_name: str, exc: BaseException) -> InputError:
    """One line for a hooks module that raised while being imported: its file and line, and the error."""
    if isinstance(exc, SyntaxError):
        where, error = f"{exc.filename}, line {exc.lineno}", f"SyntaxError: {exc.msg}"
    else:
        spec = importlib.util.find_spec(module_name)
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if spec is not None and f.filename == spec.origin] or frames
        where = f"{own[-1].filename}, line {own[-1].lineno}"
        error = "".join(traceback.format_exception_only(exc)).strip().splitlines()[-1]
    return InputError(f"hooks: module {module_name!r} failed to import: {where}: {error}")


def _import_module(module_name: str) -> ModuleType:
    """Import the user's hooks module; whatever it does wrong on import becomes one :class:`InputError`."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InputError(f"hooks: no module {module_name!r} beside the config or on sys.path") from None
        raise _import_failure(module_name, exc) from None
    except (Exception, SystemExit) as exc:  # the user's code may raise anything, even exit
        raise _import_failure(module_name, exc) from None


def load_hooks(module_name: str | None) -> Hooks:
    """Import ``module_name`` and collect the hook functions it defines."""
    if module_name is None:
        return Hooks()
    module = _import_module(module_name)
    found = {}
    for name in Hooks.__dataclass_fields__:
        function = getattr(module, name, None)
        if function is not None and not callable(function):
            raise InputError(f"hooks: {module_name}.{name} is not a function")
        found[name] = function
    return Hooks(**found)


def check_metrics(source: str, metrics: object) -> Metrics:
    """Validate a hook's returned metrics: a mapping of names to finite floats."""
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise TypeError(f"hook {source} must return a dict of metrics, got {type(metrics).__name__}")
    checked = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"hook {source} returned a metric name that is not a string: {key!r}")
        checked[key] = float(value)
    return checked
