"""TorchClassifier's options the shipped CNN does not use: FedProx's term, BatchNorm's buffers, ``optimizer=``.

Each is checked against an implementation apart from TorchClassifier's own code: FedProx against the built-in
numpy model's (the reference's, tests/test_strategies.py), the buffers through a reference run, the optimizer
against a plain PyTorch loop over the same minibatches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fltest.config.schema import ExperimentConfig, TrainingConfig
from fltest.config.strategies import FedProxStrategy
from fltest.model.batches import local_batches
from fltest.model.numpy_mlp import NumpyMLP
from fltest.params import load_params
from fltest.runner import run_experiment
from tests.conftest import base_config

torch = pytest.importorskip(
    "torch", reason="the torch tier needs the torch extra: pip install -c constraints.txt -e '.[torch]'"
)
from torch import nn  # noqa: E402

from fltest.model.torch_classifier import TorchClassifier  # noqa: E402

pytestmark = pytest.mark.torch

TRAINING = TrainingConfig(rounds=1, local_epochs=3, batch_size=8, learning_rate=0.3)
SEED = 5


def _data(rows: int = 40, shape: tuple[int, ...] = (4, 4)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.normal(size=(rows, *shape)), rng.integers(0, 3, size=rows)


def _linear(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Softmax regression, as the built-in ``logreg``."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def test_fedprox_s_term_is_the_built_in_model_s_in_float64():
    """With FedProx (``mu`` 0.5) and without, TorchClassifier in float64 takes the built-in logreg's steps (1e-12)."""
    features, labels = _data()
    torch_model, numpy_model = TorchClassifier(_linear, dtype=torch.float64), NumpyMLP([])
    weight, bias = torch_model.init_params((4, 4), 3, seed=1)  # nn.Linear: (out, in); the built-in model: (in, out)
    results = {}
    for mu in (0.0, 0.5):
        training = TRAINING.model_copy(update={"strategy": FedProxStrategy(name="fedprox", mu=mu)}) if mu else TRAINING
        ours = torch_model.train([weight, bias], features, labels, training, SEED).params
        theirs = numpy_model.train([weight.T.copy(), bias], features, labels, training, SEED).params
        assert np.allclose(ours[0].T, theirs[0], rtol=0, atol=1e-12) and np.allclose(
            ours[1], theirs[1], rtol=0, atol=1e-12
        ), mu
        results[mu] = ours
    assert (
        np.max(np.abs(results[0.5][0] - results[0.0][0])) > 1e-3
    )  # the term pulled the weights back towards the start


class _BatchNormNet(nn.Module):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.flatten, self.norm = nn.Flatten(), nn.BatchNorm1d(math.prod(input_shape))
        self.out = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.flatten(x)))


def test_batchnorm_s_running_statistics_are_parameters_that_train_evaluate_and_travel():
    """The state_dict's buffers are parameters: training updates them, evaluation reads them, a run keeps them."""
    features, labels = _data()
    model = TorchClassifier(_BatchNormNet)
    params = model.init_params((4, 4), 3, seed=1)
    names = list(_BatchNormNet((4, 4), 3).state_dict())
    assert names == [
        "norm.weight",
        "norm.bias",
        "norm.running_mean",
        "norm.running_var",
        "norm.num_batches_tracked",
        "out.weight",
        "out.bias",
    ]
    assert [p.shape for p in params] == [(16,), (16,), (16,), (16,), (), (3, 16), (3,)]
    trained = model.train(params, features, labels, TRAINING, SEED)
    running_mean, running_var, batches = trained.params[2:5]
    assert batches == trained.metrics["steps"] == 15  # 3 epochs of 5 batches
    assert (
        np.max(np.abs(running_mean)) > 0.05 and np.max(np.abs(running_var - 1.0)) > 0.05
    )  # moved from 0 and 1 towards the data's
    shifted = [p.copy() for p in trained.params]
    shifted[2] += 3.0  # another running mean: in eval mode the network normalises with it
    assert not np.allclose(
        model.evaluate(shifted, features, labels).probabilities,
        model.evaluate(trained.params, features, labels).probabilities,
    )


def test_a_run_with_a_batchnorm_model_module_keeps_its_buffers_in_the_model(tmp_path, monkeypatch):
    (tmp_path / "bn_model.py").write_text(
        "import math\n"
        "from torch import nn\n"
        "from fltest.model.torch_classifier import TorchClassifier\n"
        "def network(input_shape, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.BatchNorm1d(math.prod(input_shape)), nn.Linear(math.prod(input_shape), num_classes))\n"
        "init_params, train, evaluate = TorchClassifier(network).contract()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = base_config()
    data.pop("hooks")
    data.update(name="batchnorm", clients=3, model={"module": "bn_model"})
    data["training"].update(rounds=2, local_epochs=1)
    comparison = run_experiment(ExperimentConfig.model_validate(data), tmp_path / "results")
    assert comparison["runs"][0]["status"] == "completed", comparison
    final = load_params(tmp_path / "results" / "batchnorm" / "reference" / "model_final.npz")
    assert [p.shape for p in final] == [(64,), (64,), (64,), (64,), (), (10, 64), (10,)]
    assert np.max(final[2]) > 0.1 and final[4] > 0  # the averaged running mean and batch count: trained, and kept


def test_an_optimizer_given_is_made_fresh_each_round_and_steps_as_plain_pytorch_does():
    """``TorchClassifier(network, optimizer=...)``: SGD with momentum 0.9, made anew for each train call, gives
    what a plain PyTorch loop over the same minibatches gives (float64; 1e-12)."""
    features, labels = _data()
    made = []

    def momentum(parameters, learning_rate):
        made.append(learning_rate)
        return torch.optim.SGD(parameters, lr=learning_rate, momentum=0.9)

    model = TorchClassifier(_linear, optimizer=momentum, dtype=torch.float64)
    params = model.init_params((4, 4), 3, seed=1)
    once = model.train(params, features, labels, TRAINING, SEED).params
    twice = model.train(once, features, labels, TRAINING, SEED + 1).params
    assert made == [TRAINING.learning_rate] * 2

    def plain_loop(start, seed):  # the same network and minibatches, one optimizer for this call only
        network = _linear((4, 4), 3).to(torch.float64)
        network.load_state_dict({name: torch.from_numpy(p) for name, p in zip(network.state_dict(), start)})
        optimizer = torch.optim.SGD(network.parameters(), lr=TRAINING.learning_rate, momentum=0.9)
        x, y = torch.from_numpy(features), torch.from_numpy(labels)
        for batch in local_batches(len(labels), TRAINING, seed):
            optimizer.zero_grad()
            nn.functional.cross_entropy(network(x[batch]), y[batch]).backward()
            optimizer.step()
        return [t.detach().numpy() for t in network.state_dict().values()]

    expected_once = plain_loop(params, SEED)
    assert all(np.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(once, expected_once))
    assert all(
        np.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(twice, plain_loop(expected_once, SEED + 1))
    )  # no momentum carried over
    plain = TorchClassifier(_linear, dtype=torch.float64).train(params, features, labels, TRAINING, SEED).params
    assert np.max(np.abs(plain[0] - once[0])) > 1e-3  # momentum changed the steps
