"""The model a config names: the built-in numpy MLP, or a user's module that implements the contract."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator

import numpy as np

from fltest.config.schema import ModelConfig
from fltest.config.strategies import ScaffoldStrategy, StrategyConfig
from fltest.errors import FieldError, InputError, RunFailed
from fltest.model.contract import CORRECTION, FUNCTIONS, Model
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
            raise InputError(
                f"model.module: {name}.{function} is missing or not a function "
                f"(a model module defines {', '.join(FUNCTIONS)}: see fltest.model.contract)"
            )
    return module


def check_strategy(model: Model, strategy: StrategyConfig) -> None:
    """Raise :class:`InputError` naming ``training.strategy`` for SCAFFOLD with a model whose ``train`` takes no ``correction``."""
    if not isinstance(strategy, ScaffoldStrategy):
        return
    parameters = inspect.signature(model.train).parameters.values()
    if not any(p.name == CORRECTION or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        raise InputError(
            f"training.strategy: scaffold needs a model whose train takes {CORRECTION}= (c - c_i, added to every "
            f"gradient: see fltest.model.contract); {model.__name__}.train takes none"
        )


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
        raise FieldError(
            f"model.module: {model.__name__}.init_params raised: {where_it_failed(model.__name__, exc)}"
        ) from None
    if (
        not isinstance(params, (list, tuple))
        or not params
        or not all(isinstance(p, np.ndarray) and p.dtype.kind in "fiu" for p in params)
    ):
        raise FieldError(
            f"model.module: init_params must return a non-empty list of numeric numpy arrays, got {type(params).__name__}"
        )
    return [np.asarray(p, dtype=np.float64) for p in params]


@contextlib.contextmanager
def naming_the_model(model: Model, function: str, where: str) -> Iterator[None]:
    """Turn what a user's model raises inside into one line naming ``model.module``, the function and ``where``.

    ``where`` says when (``in round 2``, ``on client 3 in round 2``): the error is :class:`RunFailed`'s
    ``model.module: <module>.<function> raised <where>: <file>, line <n>: <Error>: <message>``. FLTest's
    own model raises as it is (a bug, with its traceback).
    """
    try:
        yield
    except Exception as exc:
        if isinstance(model, NumpyMLP):
            raise
        raise RunFailed(
            f"model.module: {model.__name__}.{function} raised {where}: {where_it_failed(model.__name__, exc)}"
        ) from exc


def trained_params(model: Model, params: Params, given: Params, where: str) -> Params:
    """What a model's ``train`` returned ``where`` as float64 arrays, how FLTest ships parameters.

    Raises :class:`RunFailed` naming the model unless it is one array for each parameter given, of its shape.
    """
    shapes = [np.shape(p) for p in params] if isinstance(params, (list, tuple)) else None
    if shapes != [p.shape for p in given]:
        name = getattr(model, "__name__", type(model).__name__)
        raise RunFailed(
            f"model.module: {name}.train returned {shapes if shapes is not None else type(params).__name__} "
            f"{where}, for parameters shaped {[p.shape for p in given]}"
        )
    return [np.asarray(p, dtype=np.float64) for p in params]
