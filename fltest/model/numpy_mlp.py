"""FLTest's built-in model: a float64 MLP in numpy; with no hidden layer it is softmax (logistic) regression.

Parameters are a flat list ``[W1, b1, W2, b2, ...]``, the form every backend ships. It takes
each sample's features as one flat row, whatever their shape.
"""

from __future__ import annotations

import math

import numpy as np

from fltest.config.schema import TrainingConfig
from fltest.model.batches import local_batches
from fltest.model.contract import Evaluation, LocalResult
from fltest.params import Params


def _forward(params: Params, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Activations of every layer input, and the softmax probabilities."""
    activations = [x]
    for layer in range(len(params) // 2 - 1):
        x = np.maximum(x @ params[2 * layer] + params[2 * layer + 1], 0.0)
        activations.append(x)
    logits = x @ params[-2] + params[-1]
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return activations, exp / exp.sum(axis=1, keepdims=True)


def _cross_entropy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.mean(np.log(probabilities[np.arange(len(labels)), labels] + 1e-12)))


def _gradients(params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Mean cross-entropy of a batch and its gradient for every parameter."""
    activations, probabilities = _forward(params, x)
    loss = _cross_entropy(probabilities, y)
    delta = probabilities
    delta[np.arange(len(y)), y] -= 1.0
    delta /= len(y)
    grads: Params = [np.empty(0)] * len(params)
    for layer in range(len(params) // 2 - 1, -1, -1):
        grads[2 * layer] = activations[layer].T @ delta
        grads[2 * layer + 1] = delta.sum(axis=0)
        if layer > 0:
            delta = (delta @ params[2 * layer].T) * (activations[layer] > 0)
    return loss, grads


def _rows(features: np.ndarray) -> np.ndarray:
    """Each sample's features as one flat row."""
    return features.reshape(len(features), -1)


class NumpyMLP:
    """The built-in model (``type: logreg`` or ``mlp``), an implementation of :mod:`fltest.model.contract`."""

    def __init__(self, hidden: list[int]) -> None:
        self.hidden = list(hidden)

    def init_params(self, feature_shape: tuple[int, ...], num_classes: int, seed: int) -> Params:
        """He-initialised weights and zero biases, from a generator seeded by ``seed``."""
        rng = np.random.default_rng([seed, 1])
        sizes = [math.prod(feature_shape), *self.hidden, num_classes]
        params: Params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            params.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_in, fan_out)))
            params.append(np.zeros(fan_out))
        return params

    def train(
        self,
        params: Params,
        features: np.ndarray,
        labels: np.ndarray,
        training: TrainingConfig,
        seed: int,
        correction: Params | None = None,
    ) -> LocalResult:
        """Minibatch SGD from ``params`` for ``local_epochs`` epochs or ``local_steps`` steps.

        Batches come from :func:`~fltest.model.batches.local_batches` (seeded by ``seed``); the
        input parameters are not modified. With FedProx each gradient gains ``mu * (w - params)``;
        with SCAFFOLD, ``correction`` (``c - c_i``). Metrics: ``train_loss`` (mean batch
        cross-entropy, without the proximal term), ``steps``.
        """
        x, y = _rows(features), labels
        start, params = params, [p.copy() for p in params]
        mu = training.strategy.proximal_mu
        corrections = correction or [None] * len(params)
        losses = []
        for batch in local_batches(len(y), training, seed):
            loss, grads = _gradients(params, x[batch], y[batch])
            for p, g, p0, c in zip(params, grads, start, corrections):
                if mu:  # FedProx: the gradient of mu/2 ||w - w_t||^2 too
                    g = g + mu * (p - p0)
                if c is not None:  # SCAFFOLD: y -= lr * (g - c_i + c)
                    g = g + c
                p -= training.learning_rate * g
            losses.append(loss)
        return LocalResult(params=params, metrics={"train_loss": float(np.mean(losses)), "steps": float(len(losses))})

    def evaluate(self, params: Params, features: np.ndarray, labels: np.ndarray) -> Evaluation:
        """Cross-entropy loss, accuracy and class probabilities of ``params`` on ``(features, labels)``."""
        _, probabilities = _forward(params, _rows(features))
        accuracy = float(np.mean(probabilities.argmax(axis=1) == labels))
        return Evaluation(loss=_cross_entropy(probabilities, labels), accuracy=accuracy, probabilities=probabilities)
