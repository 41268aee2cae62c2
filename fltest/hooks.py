"""User client hooks: optional functions in a module named by the config's ``hooks``.

A hooks module may define any of these functions (all optional):

``before_local_training(partition_id, server_round, features, labels)``
    Called on the client before local training (``features`` keep each sample's shape, as
    the model receives them: :mod:`fltest.model.contract`). Return ``None`` to train on the
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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fltest.errors import InputError
from fltest.params import Params
from fltest.user_module import import_user_module

Metrics = dict[str, float]


@dataclass(frozen=True)
class Hooks:
    """The hook functions a module defines; missing ones are ``None``."""

    before_local_training: Callable[[int, int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None] | None = (
        None
    )
    after_local_training: Callable[[int, int, Params, Params], Metrics | None] | None = None
    evaluate_metrics: Callable[[np.ndarray, np.ndarray], Metrics] | None = None


def load_hooks(module_name: str | None) -> Hooks:
    """Import ``module_name`` and collect the hook functions it defines."""
    if module_name is None:
        return Hooks()
    module = import_user_module("hooks", module_name)
    found = {}
    for name in Hooks.__dataclass_fields__:
        function = getattr(module, name, None)
        if function is not None and not callable(function):
            raise InputError(f"hooks: {module_name}.{name} is not a function")
        found[name] = function
    return Hooks(**found)


def check_metrics(source: str, metrics: object) -> Metrics:
    """Validate returned metrics (``source``: who returned them, e.g. ``hook evaluate_metrics``): names to floats."""
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise TypeError(f"{source} must return a dict of metrics, got {type(metrics).__name__}")
    checked = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"{source} returned a metric name that is not a string: {key!r}")
        checked[key] = float(value)
    return checked
