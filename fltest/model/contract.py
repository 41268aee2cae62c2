"""The model contract: what FLTest asks of a model, over a list of numpy arrays (what every backend ships).

A model is anything with these three functions; a user's module that defines them at top level
is one (``model: {module: my_model}`` in the config, found beside the config like a hooks module):

``init_params(feature_shape, num_classes, seed) -> list[np.ndarray]``
    The initial parameters, from one sample's feature shape (``(64,)`` for flat rows, ``(8, 8)``
    or ``(32, 32, 3)`` for images), the number of classes and the experiment's seed.
``train(params, features, labels, training, seed) -> LocalResult``
    One round of local training on one client: ``features`` is ``(n, *feature_shape)`` float64,
    ``labels`` ``(n,)`` int64, ``training`` the config's :class:`~fltest.config.schema.TrainingConfig`
    (epochs or steps, batch size, learning rate), ``seed`` an int for this client and round.
    Returns the new parameters and the client's metrics (names to floats).
    With SCAFFOLD it is called with ``correction=`` too, one array a parameter (``c - c_i``, the
    server's control variate minus the client's), which it adds to every minibatch gradient of its
    trainable parameters (buffers have none); a ``train`` without that keyword cannot run SCAFFOLD.
``evaluate(params, features, labels) -> Evaluation``
    Loss, accuracy and class probabilities of ``params`` on the test split, plus any extra metrics.

Every function must be deterministic given its inputs, or the backends cannot agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fltest.config.schema import TrainingConfig
from fltest.params import Params

FUNCTIONS = ("init_params", "train", "evaluate")  # what a model module must define
CORRECTION = "correction"  # the keyword SCAFFOLD's clients pass train its correction c - c_i with


@dataclass(frozen=True)
class LocalResult:
    """What local training returns: the new parameters and the client's metrics (e.g. ``train_loss``)."""

    params: Params
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    """A model's test: cross-entropy loss, accuracy, class probabilities ``(n, num_classes)``, extra metrics."""

    loss: float
    accuracy: float
    probabilities: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)


class Model(Protocol):
    """The three functions of the contract (a module defining them at top level is a ``Model``)."""

    def init_params(self, feature_shape: tuple[int, ...], num_classes: int, seed: int) -> Params:
        """The initial parameters."""

    def train(
        self, params: Params, features: np.ndarray, labels: np.ndarray, training: TrainingConfig, seed: int
    ) -> LocalResult:
        """One round of local training on one client (with SCAFFOLD: and ``correction=``)."""

    def evaluate(self, params: Params, features: np.ndarray, labels: np.ndarray) -> Evaluation:
        """Loss, accuracy and class probabilities on a test split."""
