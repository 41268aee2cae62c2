"""Softmax regression trained with minibatch SGD in numpy: the bare apps' local training (no FLTest import).

The same work as FLTest's built-in ``logreg`` model: ``epochs`` shuffled passes in batches of
``batch_size`` at learning rate ``lr``, and a test-set evaluation of the global model each round.
"""

from __future__ import annotations

import numpy as np


def init(features: int, classes: int, seed: int = 0) -> list[np.ndarray]:
    """He-initialised weights and zero biases."""
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, np.sqrt(2.0 / features), size=(features, classes)), np.zeros(classes)]


def _probabilities(params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    logits = x @ params[0] + params[1]
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)


def train(params, x, y, epochs: int, batch_size: int, lr: float, seed: int) -> tuple[list[np.ndarray], float]:
    """``params`` after local SGD on ``(x, y)``, and the last batch's loss."""
    w, b = params[0].copy(), params[1].copy()
    rng = np.random.default_rng(seed)
    loss = 0.0
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y), batch_size):
            rows = order[start : start + batch_size]
            p = _probabilities([w, b], x[rows])
            loss = float(-np.mean(np.log(p[np.arange(len(rows)), y[rows]] + 1e-12)))
            p[np.arange(len(rows)), y[rows]] -= 1.0
            p /= len(rows)
            w -= lr * (x[rows].T @ p)
            b -= lr * p.sum(axis=0)
    return [w, b], loss


def evaluate(params, x, y) -> tuple[float, float]:
    """Loss and accuracy of ``params`` on ``(x, y)``."""
    p = _probabilities(params, x)
    loss = float(-np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)))
    return loss, float(np.mean(p.argmax(axis=1) == y))
