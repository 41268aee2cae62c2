"""Model modules the tests write beside a config, as a user's own (``model: {module: <name>}``)."""

from __future__ import annotations

from pathlib import Path

import pytest

BUFFERS_MODEL = '''
"""Softmax regression that ships two buffers as a PyTorch network with BatchNorm does: a 0-d float (the last
batch's loss) and a 0-d integer (the steps taken, as num_batches_tracked); like torch.from_numpy, it refuses
anything but arrays; with SCAFFOLD it adds the correction to its gradients."""
import numpy as np
from fltest.model import Evaluation, LocalResult


def init_params(feature_shape, num_classes, seed):
    weights = np.random.default_rng(seed).normal(0.0, 0.01, size=(int(np.prod(feature_shape)), num_classes))
    return [weights, np.zeros(num_classes), np.array(0.0), np.array(0, dtype=np.int64)]


def _arrays(params):
    for p in params:
        if not isinstance(p, np.ndarray):
            raise TypeError(f"expected np.ndarray (got {type(p).__module__}.{type(p).__name__})")
    return params


def _probabilities(weights, bias, rows):
    logits = rows @ weights + bias
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def train(params, features, labels, training, seed, correction=None):
    weights, bias, _, steps = _arrays(params)
    corrections = _arrays(correction)[:2] if correction is not None else (0.0, 0.0)
    weights, bias, rows = weights.copy(), bias.copy(), features.reshape(len(features), -1)
    loss, taken = 0.0, 0
    for batch in np.array_split(np.random.default_rng(seed).permutation(len(labels)), max(1, len(labels) // training.batch_size)):
        delta = _probabilities(weights, bias, rows[batch])
        loss = float(-np.mean(np.log(delta[np.arange(len(batch)), labels[batch]])))
        delta[np.arange(len(batch)), labels[batch]] -= 1.0
        weights -= training.learning_rate * (rows[batch].T @ delta / len(batch) + corrections[0])
        bias -= training.learning_rate * (delta.mean(axis=0) + corrections[1])
        taken += 1
    return LocalResult([weights, bias, np.array(loss), np.array(int(steps) + taken, dtype=np.int64)])


def evaluate(params, features, labels):
    weights, bias, _, _ = _arrays(params)
    probabilities = _probabilities(weights, bias, features.reshape(len(features), -1))
    loss = float(-np.mean(np.log(probabilities[np.arange(len(labels)), labels] + 1e-12)))
    return Evaluation(loss, float(np.mean(probabilities.argmax(axis=1) == labels)), probabilities)
'''


BATCHNORM_CNN = """
from torch import nn
from fltest.model.torch_classifier import TorchClassifier


def network(input_shape, num_classes):
    channels, height, width = input_shape
    return nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * (height // 2) * (width // 2), num_classes))


init_params, train, evaluate = TorchClassifier(network).contract()
"""


def beside(folder: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    """Write ``source`` as ``<folder>/<name>.py`` and put ``folder`` on ``sys.path``, where a run (and its
    framework's processes, through the driver's ``sys.path``) imports it from."""
    (folder / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(folder))
