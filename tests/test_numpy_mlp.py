"""The built-in model with hidden layers (``type: mlp``): its gradients through every layer, and a run that learns."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from fltest.config.schema import TrainingConfig
from fltest.model.numpy_mlp import NumpyMLP
from fltest.params import load_params
from tests.conftest import base_config

HIDDEN = [6, 5]


def test_one_step_follows_the_loss_gradient_through_every_hidden_layer():
    """One full-batch SGD step moves each parameter by ``-lr`` times the loss's gradient, checked against
    central differences of ``evaluate``'s loss: both hidden layers, their ReLUs and biases included."""
    rng = np.random.default_rng(0)
    features, labels = (
        rng.normal(size=(12, 3, 3)),
        rng.integers(0, 4, size=12),
    )  # 9 inputs: shaped samples are flattened
    model = NumpyMLP(HIDDEN)
    params = model.init_params((3, 3), 4, seed=1)
    assert [p.shape for p in params] == [(9, 6), (6,), (6, 5), (5,), (5, 4), (4,)]
    for p in params[1::2]:
        p += rng.normal(scale=0.1, size=p.shape)  # biases away from 0: a bias's gradient is checked too
    learning_rate = 1e-3
    training = TrainingConfig(rounds=1, local_steps=1, batch_size=len(labels), learning_rate=learning_rate)
    stepped = model.train(params, features, labels, training, seed=2).params
    step = 1e-6
    for index, p in enumerate(params):
        gradient = (p - stepped[index]) / learning_rate
        numeric = np.empty_like(p)
        for position in np.ndindex(p.shape):
            losses = []
            for sign in (1, -1):
                moved = [q.copy() for q in params]
                moved[index][position] += sign * step
                losses.append(model.evaluate(moved, features, labels).loss)
            numeric[position] = (losses[0] - losses[1]) / (2 * step)
        assert np.allclose(gradient, numeric, rtol=1e-4, atol=1e-7), (index, np.max(np.abs(gradient - numeric)))


def test_an_mlp_config_trains_on_the_digits_from_the_command_line(write_config, tmp_path):
    data = base_config()
    data.update(name="mlp", model={"type": "mlp", "hidden": [32, 16]})
    data["training"].update(rounds=6, learning_rate=0.3)
    result = subprocess.run(
        [sys.executable, "-m", "fltest.cli", "run", str(write_config(data))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "results" / "mlp" / "reference"
    assert [p.shape for p in load_params(run_dir / "model_final.npz")] == [
        (64, 32),
        (32,),
        (32, 16),
        (16,),
        (16, 10),
        (10,),
    ]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["test"]["accuracy"] > 0.8  # 0.88 (seed 42); chance 0.1
