"""The strategies beyond FedAvg: their config, and the reference's server steps against hand computations.

The toy case: one scalar parameter, two clients (1 and 3 examples), two rounds. Each expected
value is worked out step by step from the paper's equations with the numbers written out, not
with the code under test.
"""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
import yaml

from fltest.config.schema import ExperimentConfig, TrainingConfig
from fltest.config.strategies import STRATEGIES, ScaffoldStrategy, example_strategy
from fltest.control_variates import next_control
from fltest.fedavg import ClientUpdate
from fltest.model.numpy_mlp import NumpyMLP
from fltest.params import load_params
from fltest.runner import run_experiment
from fltest.server_update import server_update
from tests.conftest import base_config
from tests.models import BUFFERS_MODEL, beside
from tests.user_folder import FLTEST

X0 = 1.0  # the initial global model
ROUND_1 = (2.0, 4.0)  # the two clients' models after local training in round 1
ROUND_2_CHANGE = (0.5, -1.0)  # and their change from the round-2 global model


def _two_rounds(strategy: dict, round_2_change: tuple[float, float] = ROUND_2_CHANGE) -> tuple[float, float]:
    """The global model after rounds 1 and 2 of the toy case under ``strategy`` (round 2's changes may be given)."""
    server = server_update(TrainingConfig(rounds=2, local_epochs=1, strategy=strategy).strategy, num_clients=2)

    def updates(models):
        return [ClientUpdate(0, [np.array([models[0]])], 1), ClientUpdate(1, [np.array([models[1]])], 3)]

    first = float(server.apply([np.array([X0])], updates(ROUND_1))[0][0])
    second = float(server.apply([np.array([first])], updates([first + change for change in round_2_change]))[0][0])
    return first, second


def test_fedavg_and_fedprox_take_the_average_weighted_by_examples():
    first = (1 * 2.0 + 3 * 4.0) / 4  # 3.5
    second = first + (1 * 0.5 + 3 * -1.0) / 4  # 3.5 - 0.625
    assert _two_rounds({"name": "fedavg"}) == pytest.approx((3.5, 2.875), abs=1e-15) == (first, second)
    assert _two_rounds({"name": "fedprox", "mu": 0.1}) == pytest.approx((first, second), abs=1e-15)


def test_fedavgm_follows_hsu_et_al_with_a_server_learning_rate():
    eta, beta = 0.5, 0.9
    delta_1 = X0 - 3.5  # w_t minus the weighted average: -2.5
    v_1 = delta_1  # v starts at 0
    x_1 = X0 - eta * v_1  # 2.25
    delta_2 = -(1 * 0.5 + 3 * -1.0) / 4  # 0.625
    v_2 = beta * v_1 + delta_2  # -2.25 + 0.625 = -1.625
    x_2 = x_1 - eta * v_2  # 2.25 + 0.8125 = 3.0625
    assert _two_rounds({"name": "fedavgm", "server_learning_rate": eta, "server_momentum": beta}) == pytest.approx(
        (x_1, x_2), abs=1e-15
    )


ETA, BETA_1, BETA_2, TAU = 0.1, 0.9, 0.99, 0.1
DELTA_1 = ((2.0 - X0) + (4.0 - X0)) / 2  # the plain mean of the clients' changes: 2.0
DELTA_2 = (0.5 + -1.0) / 2  # -0.25
M_1 = (1 - BETA_1) * DELTA_1  # 0.2 (m starts at 0)
M_2 = BETA_1 * M_1 + (1 - BETA_1) * DELTA_2  # 0.18 - 0.025 = 0.155
V_START = TAU**2  # 0.01


def _adaptive_steps(v_1: float, v_2: float) -> tuple[float, float]:
    x_1 = X0 + ETA * M_1 / (math.sqrt(v_1) + TAU)
    return x_1, x_1 + ETA * M_2 / (math.sqrt(v_2) + TAU)


@pytest.mark.parametrize(
    ("name", "v_1", "v_2"),
    [
        # FedAdagrad: v_t = v_{t-1} + Δ²: 0.01 + 4 = 4.01, then 4.01 + 0.0625 = 4.0725
        ("fedadagrad", 4.01, 4.0725),
        # FedAdam: v_t = β2 v + (1-β2) Δ²: 0.0099 + 0.04 = 0.0499, then 0.049401 + 0.000625 = 0.050026
        ("fedadam", 0.0499, 0.050026),
        # FedYogi: v_t = v - (1-β2) Δ² sign(v - Δ²): 0.01 + 0.04 = 0.05 (v = 0.01 < Δ² = 4),
        # then 0.05 + 0.000625 = 0.050625 (v = 0.05 < Δ² = 0.0625 still)
        ("fedyogi", 0.05, 0.050625),
    ],
)
def test_the_adaptive_strategies_follow_reddi_et_al_algorithm_2(name, v_1, v_2):
    parameters = {"server_learning_rate": ETA, "beta_1": BETA_1, "tau": TAU}
    if name != "fedadagrad":
        parameters["beta_2"] = BETA_2
    expected = _adaptive_steps(v_1, v_2)
    assert _two_rounds({"name": name, **parameters}) == pytest.approx(expected, rel=1e-14)


def test_fedyogi_shrinks_v_where_it_exceeds_the_squared_change():
    """FedYogi's sign(v - Δ²) (Reddi et al., Algorithm 2) on its other branch: round 2's mean change is small, so
    v_1 = 0.05 > Δ_2² = 0.01 and v shrinks by (1 - β2) Δ² = 0.0001 (the branch the case above never takes)."""
    delta_2 = (0.1 + -0.3) / 2  # -0.1
    m_2 = BETA_1 * M_1 + (1 - BETA_1) * delta_2  # 0.18 - 0.01 = 0.17
    v_1 = 0.05  # as above
    v_2 = v_1 - (1 - BETA_2) * delta_2**2  # sign(0.05 - 0.01) = +1: 0.0499
    x_1 = X0 + ETA * M_1 / (math.sqrt(v_1) + TAU)
    expected = (x_1, x_1 + ETA * m_2 / (math.sqrt(v_2) + TAU))
    parameters = {"server_learning_rate": ETA, "beta_1": BETA_1, "beta_2": BETA_2, "tau": TAU}
    assert _two_rounds({"name": "fedyogi", **parameters}, round_2_change=(0.1, -0.3)) == pytest.approx(
        expected, rel=1e-14
    )


def test_fedprox_adds_mu_times_the_distance_from_the_global_model_to_each_gradient():
    """Two plain-SGD steps on one batch of two samples: the second step's gradient gains mu * (w - w_t)."""
    model = NumpyMLP(hidden=[])
    start = model.init_params((3,), 2, seed=1)
    features = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    labels = np.array([0, 1])
    plain = TrainingConfig(rounds=1, local_steps=2, batch_size=2, learning_rate=0.5)
    proximal = TrainingConfig(
        rounds=1, local_steps=2, batch_size=2, learning_rate=0.5, strategy={"name": "fedprox", "mu": 0.3}
    )
    without = model.train(start, features, labels, plain, seed=4).params
    one_step = model.train(
        start, features, labels, TrainingConfig(rounds=1, local_steps=1, batch_size=2, learning_rate=0.5), seed=4
    ).params
    with_mu = model.train(start, features, labels, proximal, seed=4).params
    # The first step starts at w_t (no proximal pull); the second is the plain second step minus lr * mu * (w_1 - w_t).
    second_plain = [w2 - w1 for w2, w1 in zip(without, one_step)]
    expected = [w1 + step - 0.5 * 0.3 * (w1 - w0) for w1, step, w0 in zip(one_step, second_plain, start)]
    assert all(np.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(with_mu, expected))
    assert not all(np.array_equal(a, b) for a, b in zip(with_mu, without))


def test_scaffold_s_server_follows_karimireddy_et_al_with_a_global_learning_rate():
    """Two of N = 3 clients a round, η_g = 0.5: the plain mean of the model changes times η_g, and c moving by |S|/N
    of the mean control change (the clients' example counts, 1 and 3, play no part)."""
    server = server_update(ScaffoldStrategy(name="scaffold", server_learning_rate=0.5), num_clients=3)
    assert [float(c) for c in server.control([np.array(X0)])] == [0.0]  # c starts at 0

    def updates(models, control_deltas):
        return [
            ClientUpdate(p, [np.array(y)], n, control_delta=[np.array(d)])
            for p, n, y, d in zip((0, 2), (1, 3), models, control_deltas)
        ]

    first = server.apply([np.array(X0)], updates((2.0, 4.0), (0.3, -0.1)))
    x_1 = X0 + 0.5 * ((2.0 - X0) + (4.0 - X0)) / 2  # 1 + 0.5 * 2 = 2.0
    c_1 = 0.0 + (2 / 3) * (0.3 + -0.1) / 2  # 2/3 of 0.1
    assert float(first[0]) == x_1 == 2.0 and float(server.control(first)[0]) == pytest.approx(c_1, rel=1e-15)
    second = server.apply(first, updates((2.5, 1.0), (0.2, 0.4)))
    x_2 = x_1 + 0.5 * (0.5 + -1.0) / 2  # 2.0 - 0.125
    c_2 = c_1 + (2 / 3) * (0.2 + 0.4) / 2  # + 0.2
    assert float(second[0]) == x_2 == 1.875 and float(server.control(second)[0]) == pytest.approx(c_2, rel=1e-15)
    assert second[0].shape == () and isinstance(server.control(second)[0], np.ndarray)


def test_scaffold_s_option_ii_control_variate_worked_by_hand():
    """``c_i+ = c_i - c + (x - y_i) / (K η_l)``: c_i 0.2, c 0.5, x 1.0, y_i 0.4, K 3, η_l 0.1: -0.3 + 0.6 / 0.3 = 1.7."""
    new = next_control([np.array(0.2)], [np.array(0.5)], [np.array(1.0)], [np.array(0.4)], steps=3, learning_rate=0.1)
    assert float(new[0]) == pytest.approx(0.2 - 0.5 + 2.0, rel=1e-15) and new[0].shape == ()


def test_the_built_in_model_adds_scaffold_s_correction_to_every_gradient():
    """Two full-batch SGD steps: each is the plain step from where the last one ended, minus lr * (c - c_i)."""
    model = NumpyMLP(hidden=[3])
    start = model.init_params((3,), 2, seed=1)
    features = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [0.5, 0.5, 0.5]])
    labels = np.array([0, 1, 1])
    one, two = (TrainingConfig(rounds=1, local_steps=k, batch_size=3, learning_rate=0.5) for k in (1, 2))
    correction = [np.random.default_rng(5).normal(size=p.shape) for p in start]
    corrected = model.train(start, features, labels, two, seed=4, correction=correction).params
    middle = [w - 0.5 * c for w, c in zip(model.train(start, features, labels, one, seed=4).params, correction)]
    expected = [w - 0.5 * c for w, c in zip(model.train(middle, features, labels, one, seed=4).params, correction)]
    assert all(np.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(corrected, expected))
    assert not all(
        np.allclose(a, b) for a, b in zip(corrected, model.train(start, features, labels, two, seed=4).params)
    )


@pytest.mark.parametrize(
    ("strategy", "field"),
    [
        ("fedfoo", "training.strategy"),
        ({"name": "fedprox"}, "training.strategy.fedprox.mu"),
        ({"name": "fedprox", "mu": 0}, "training.strategy.fedprox.mu"),
        ({"name": "fedadam", "tau": -1e-3}, "training.strategy.fedadam.tau"),
        ({"name": "fedyogi", "beta_2": 1.0}, "training.strategy.fedyogi.beta_2"),
        ({"name": "fedavgm", "beta_2": 0.9}, "training.strategy.fedavgm.beta_2"),
        ({"name": "fedadagrad", "beta_2": 0.9}, "training.strategy.fedadagrad.beta_2"),
        ({"name": "scaffold", "server_learning_rate": 0}, "training.strategy.scaffold.server_learning_rate"),
        ({"name": "scaffold", "mu": 0.1}, "training.strategy.scaffold.mu"),
        ({"name": "fedtrimmedavg", "beta": 0.5}, "training.strategy.fedtrimmedavg.beta"),
        ({"name": "krum", "num_malicious": -1}, "training.strategy.krum.num_malicious"),
        ({"name": "krum", "num_malicious": 4}, "training.strategy.num_malicious: 4 needs at least 11 clients a round"),
        ({"name": "multikrum"}, "training.strategy.multikrum.num_selected"),
        ({"name": "multikrum", "num_selected": 11}, "training.strategy.num_selected: 11 is more than the 10 clients"),
        (
            {"name": "bulyan", "num_malicious": 2},
            "training.strategy.num_malicious: 2 needs at least 11 clients a round",
        ),
    ],
)
def test_a_bad_strategy_is_one_line_naming_the_file_and_field_and_exit_2(tmp_path, strategy, field):
    config = base_config()
    config["training"]["strategy"] = strategy
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([FLTEST, "validate", "exp.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"fltest: error: exp.yaml: {field}"), result.stderr


@pytest.mark.parametrize("name", ["fedprox", "fedavgm", "fedadagrad", "fedadam", "fedyogi", "scaffold"])
def test_the_reference_runs_each_strategy_from_a_user_folder(tmp_path, name):
    config = base_config()
    config["name"] = f"strategy-{name}"
    config.pop("hooks")
    config["training"].update(rounds=3, strategy={"name": name, "mu": 0.01} if name == "fedprox" else name)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([FLTEST, "run", "exp.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    experiment = tmp_path / "results" / f"strategy-{name}"
    saved = yaml.safe_load((experiment / "config.yaml").read_text())
    assert saved["training"]["strategy"]["name"] == name
    records = [json.loads(line) for line in (experiment / "reference" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2, 3]
    assert records[-1]["test"]["accuracy"] > records[0]["test"]["accuracy"]  # it learns


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_keeps_each_parameter_s_shape_and_dtype_0_d_and_integer_buffers_included(
    tmp_path, monkeypatch, name
):
    """The reference hands the model arrays of the global model's shapes, float64, every round: numpy's arithmetic
    turned a 0-d array into a scalar (``TypeError: expected np.ndarray (got numpy.float64)`` from a PyTorch model
    with BatchNorm, at round 1's evaluation), and an integer buffer failed FedAvg's in-place sum."""
    beside(tmp_path, monkeypatch, "buffers_model", BUFFERS_MODEL)
    data = base_config()
    data["training"].update(rounds=3, strategy=example_strategy(name))
    data.update(
        name=f"buffers-{name}", hooks=None, model={"module": "buffers_model"}, output={"save_round_models": True}
    )
    comparison = run_experiment(ExperimentConfig.model_validate(data), tmp_path / "results")
    row = comparison["runs"][0]
    assert row["status"] == "completed", row
    for server_round in range(4):
        params = load_params(
            tmp_path / "results" / data["name"] / "reference" / "models" / f"round-{server_round:04d}.npz"
        )
        assert [(p.shape, p.dtype) for p in params] == [
            ((64, 10), np.float64),
            ((10,), np.float64),
            ((), np.float64),
            ((), np.float64),
        ]
