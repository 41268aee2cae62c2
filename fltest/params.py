"""Model parameters as FLTest stores and ships them: float64 arrays keyed ``p0, p1, ...`` in order.

A model's parameters are a list of arrays (``[W1, b1, W2, b2, ...]`` for the numpy MLP). Every
place that writes them down or sends them uses this module, so that all agree on the keys and
the dtype: the results' ``.npz`` files, the Flower messages (:func:`keyed` for an ArrayRecord),
NVFlare's exchange (its FLModel dicts and round files) and the deployment channel (``.npz``
bytes in a log line).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

Params = list[np.ndarray]


def parameter_key(position: int) -> str:
    """The key of the parameter at ``position`` in :func:`keyed`'s mapping: ``p<position>``."""
    return f"p{position}"


def keyed(params: Params) -> dict[str, np.ndarray]:
    """``{"p0": params[0], "p1": params[1], ...}``, each array float64 (a float64 array is not copied)."""
    return {parameter_key(i): np.asarray(p, dtype=np.float64) for i, p in enumerate(params)}


def unkeyed(arrays: dict[str, Any]) -> Params:
    """The inverse of :func:`keyed`: the arrays of ``p0, p1, ...`` in that order, as float64."""
    return [np.asarray(arrays[parameter_key(i)], dtype=np.float64) for i in range(len(arrays))]


def shaped_like(values: list[Any], like: Params) -> Params:
    """``values`` as arrays of ``like``'s dtypes, one for one: numpy's arithmetic turns a 0-d array into a scalar
    (``np.array(1.0) / 2`` is ``np.float64(0.5)``), which a model's ``torch.from_numpy`` refuses."""
    return [np.asarray(value, dtype=parameter.dtype) for value, parameter in zip(values, like, strict=True)]


def save_params(target: Path | BinaryIO, params: Params) -> None:
    """Write ``params`` as an uncompressed ``.npz`` with keys ``p0, p1, ...``."""
    np.savez(target, **keyed(params))


def load_params(source: Path | BinaryIO) -> Params:
    """Read parameters written by :func:`save_params`."""
    with np.load(source) as archive:
        return unkeyed({name: archive[name] for name in archive.files})


def params_to_bytes(params: Params) -> bytes:
    """``params`` as the bytes of a :func:`save_params` file."""
    buffer = io.BytesIO()
    save_params(buffer, params)
    return buffer.getvalue()


def params_from_bytes(data: bytes) -> Params:
    """The inverse of :func:`params_to_bytes`."""
    return load_params(io.BytesIO(data))
