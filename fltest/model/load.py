"""The model a config names: the built-in numpy MLP, or a user's module that implements the contract."""

from __future__ import annotations

import functools

import numpy as np

from fltest.config.schema import ModelConfig
from fltest.errors import FieldError, InputError
from fltest.model.contract import FUNCTIONS, Model
from fltest.model.numpy_mlp import NumpyMLP
from fltest.params import Params
from fltest.user_module import import_user_module, where_it_failed


def load_model(config: ModelConfig) -> Model:
    """The model ``config`` names; a user's module is imported once a process (each Ray worker, NVFlare client).

    Raises :class:`InputError` naming ``model.module`` for a module that fails to import or lacks
    one of :data:`~fltest.model.contract.FUNCTIONS`.
    """
    if config.module is None:
        return NumpyMLP(config.hidden)
    return _model_module(config.module)


@functools.cache
def _model_module(name: str) -> Model:
    module = import_user_module("model.module", name)
    for function in FUNCTIONS:
        if not callable(getattr(module, function, None)):
            raise InputError(f"model.module: {name}.{function} is missing or not a function "
                             f"(a model module defines {', '.join(FUNCTIONS)}: see fltest.model.contract)")  # fmt: skip
    return module


def initial_params(model: Model, feature_shape: tuple[int, ...], num_classes: int, seed: int) -> Params:
    """``model.init_params(...)`` as float64 arrays (how FLTest stores and ships parameters), checked.

    Raises :class:`FieldError` naming ``model.module`` when a user's model raises (its file, line
    and error) or returns anything but a non-empty list of numeric arrays.
    """
    try:
        params = model.init_params(tuple(feature_shape), num_classes, seed)
    except Exception as exc:
        if isinstance(model, NumpyMLP):  # FLTest's own: a bug, with its traceback
            raise
        raise FieldError(f"model.module: {model.__name__}.init_params raised: {where_it_failed(model.__name__, exc)}") from None
    if not isinstance(params, (list, tuple)) or not params or not all(isinstance(p, np.ndarray) and p.dtype.kind in "fiu" for p in params):
        raise FieldError(f"model.module: init_params must return a non-empty list of numeric numpy arrays, got {type(params).__name__}")
    return [np.asarray(p, dtype=np.float64) for p in params]
