"""The Gaussian noise of DP-FedAvg, drawn so that a run repeats.

Flower's wrappers draw from numpy's global generator and take no seed: FLTest seeds that generator from the
experiment's seed and the round around each of their aggregations (:func:`global_generator_seeded`), and the
reference draws from a generator seeded the same way (:func:`noise_generator`), in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from fltest.params import Params


def noise_seed(seed: int, server_round: int) -> int:
    """The seed of round ``server_round``'s noise, drawn from the experiment's ``seed``."""
    return int(np.random.SeedSequence([seed, 7, server_round]).generate_state(1)[0])


def noise_generator(seed: int, server_round: int) -> np.random.RandomState:
    """The generator of round ``server_round``'s noise: numpy's legacy generator, the kind ``np.random.normal``
    draws from."""
    return np.random.RandomState(noise_seed(seed, server_round))


@contextmanager
def global_generator_put_back() -> Iterator[None]:
    """Numpy's global generator's state put back on the way out, whatever drew from it or seeded it inside."""
    state = np.random.get_state()
    try:
        yield
    finally:
        np.random.set_state(state)


@contextmanager
def global_generator_seeded(seed: int, server_round: int) -> Iterator[None]:
    """Numpy's global generator seeded as :func:`noise_generator` seeds round ``server_round``'s, its state put back
    on the way out."""
    with global_generator_put_back():
        np.random.seed(noise_seed(seed, server_round))
        yield


def noise_stdv(noise_multiplier: float, clipping_norm: float, clients: int) -> float:
    """The noise's standard deviation on the average of ``clients`` clipped changes: ``z·C/m``."""
    return float((noise_multiplier * clipping_norm) / clients)


def with_gaussian_noise(params: Params, std: float, generator: np.random.RandomState) -> Params:
    """``params`` plus ``N(0, std²)`` on every coordinate, array after array."""
    return [p + generator.normal(0, std, np.shape(p)).astype(np.asarray(p).dtype) for p in params]


def measured_stdv(noised: Params, clean: Params) -> float:
    """The root mean square of ``noised - clean`` over every coordinate: the noise's standard deviation, measured."""
    squares = [np.square(np.subtract(n, c)).ravel() for n, c in zip(noised, clean, strict=True)]
    return float(np.sqrt(np.mean(np.concatenate(squares))))
