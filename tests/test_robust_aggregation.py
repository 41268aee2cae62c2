"""The reference's robust aggregators and q-FedAvg against hand computations: one parameter, a few clients, one round.

The clients' models are 0, 1, 2 and 10 (client 3 an outlier), with 1, 1, 1 and 97 examples, so that a weighted
average would follow the outlier; every expected value is worked out from the papers' definitions by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from fltest.config.schema import ExperimentConfig, TrainingConfig
from fltest.fedavg import LOSS_BEFORE_TRAINING, ClientUpdate, client_update
from fltest.hooks import Hooks
from fltest.model import load_model
from fltest.robust_aggregation import Bulyan
from fltest.server_update import server_update
from tests.conftest import base_config

MODELS = (0.0, 1.0, 2.0, 10.0)
EXAMPLES = (1, 1, 1, 97)


def _aggregate(strategy: dict, models=MODELS) -> float:
    server = server_update(TrainingConfig(rounds=1, local_epochs=1, strategy=strategy).strategy, num_clients=4)
    updates = [ClientUpdate(k, [np.array([m])], n) for k, (m, n) in enumerate(zip(models, EXAMPLES))]
    return float(server.apply([np.array([5.0])], updates)[0][0])


def test_fedmedian_takes_the_mean_of_the_two_middle_values_whatever_the_examples():
    assert _aggregate({"name": "fedmedian"}) == 1.5  # (1 + 2) / 2
    assert _aggregate({"name": "fedmedian"}, (0.0, 1.0, 2.0, 1e9)) == 1.5  # the outlier moves nothing


@pytest.mark.parametrize(
    ("beta", "expected"),
    [
        (0.25, 1.5),  # floor(0.25 * 4) = 1 cut at each end: (1 + 2) / 2
        (0.2, 3.25),  # floor(0.8) = 0 cut: (0 + 1 + 2 + 10) / 4, unweighted
    ],
)
def test_fedtrimmedavg_cuts_floor_beta_n_values_at_each_end_and_averages_the_rest(beta, expected):
    assert _aggregate({"name": "fedtrimmedavg", "beta": beta}) == expected


def test_krum_takes_the_model_closest_to_its_n_minus_f_minus_2_nearest():
    """f = 0: each model's 2 nearest others. Scores: 0: 1 + 4 = 5; 1: 1 + 1 = 2; 2: 1 + 4 = 5; 10: 64 + 81 = 145."""
    assert _aggregate({"name": "krum"}) == 1.0


def test_krum_with_one_malicious_client_counts_one_neighbour():
    """Models 0, 1, 3 and 10. f = 0, the 2 nearest others: scores 1 + 9, 1 + 4, 4 + 9, 49 + 81, client 1 wins.
    f = 1 (n = 4 > 2f + 2), the nearest other: scores 1, 1, 4, 49, a tie that goes to the lower partition, 0."""
    assert _aggregate({"name": "krum", "num_malicious": 0}, (0.0, 1.0, 3.0, 10.0)) == 1.0
    assert _aggregate({"name": "krum", "num_malicious": 1}, (0.0, 1.0, 3.0, 10.0)) == 0.0


def test_multikrum_averages_the_m_best_scored_models_unweighted():
    """Scores 5, 2, 5, 145: the best is client 1, then clients 0 and 2 tie and the lower partition is taken."""
    assert _aggregate({"name": "multikrum", "num_selected": 2}) == 0.5  # (0 + 1) / 2
    assert _aggregate({"name": "multikrum", "num_selected": 3}) == 1.0  # (0 + 1 + 2) / 3


def test_bulyan_chooses_n_minus_2f_models_by_krum_one_at_a_time_then_trims_around_their_median():
    """Seven clients, 0, 1, 2, 3, 4, 100 and -50, f = 1. Krum over all seven (4 nearest) picks 2 (score 1+1+4+4);
    over the six left (3 nearest) 1 and 3 tie at 14, 1 is taken; over five (2 nearest) 3 (1 + 9); over four (1
    nearest) 0 and 4 tie at 16, 0 is taken; over three, 4 and -50 tie at 2916, 4 is taken. So θ = 5 models, 0 to 4;
    each coordinate is the mean of the β = 3 closest to their median, 2: (1 + 2 + 3) / 3 = 2."""
    models = (0.0, 1.0, 2.0, 3.0, 4.0, 100.0, -50.0)
    strategy = TrainingConfig(rounds=1, local_epochs=1, strategy={"name": "bulyan", "num_malicious": 1}).strategy
    updates = [ClientUpdate(k, [np.array([m])], 1) for k, m in enumerate(models)]
    assert Bulyan(strategy).chosen(updates) == [0, 1, 2, 3, 4]
    assert float(server_update(strategy, 7).apply([np.array([5.0])], updates)[0][0]) == 2.0


def _q_fedavg(q: float) -> float:
    """w_t = 1, learning rate 0.5 (L = 2); client 0 sends 2 with loss 4 before training, client 1 sends 0 with loss 1."""
    strategy = TrainingConfig(rounds=1, local_epochs=1, strategy={"name": "qfedavg", "q": q}).strategy
    updates = [
        ClientUpdate(0, [np.array([2.0])], 10, {LOSS_BEFORE_TRAINING: 4.0}),
        ClientUpdate(1, [np.array([0.0])], 90, {LOSS_BEFORE_TRAINING: 1.0}),
    ]
    return float(server_update(strategy, 2, learning_rate=0.5).apply([np.array([1.0])], updates)[0][0])


def test_q_fedavg_moves_towards_the_client_of_the_higher_loss():
    """q = 0.5: Δw = 2(1 - 2) = -2 and 2(1 - 0) = 2; Δ = √4·(-2) = -4 and 1·2 = 2; h = 0.5·4^-0.5·4 + 2·√4 = 5 and
    0.5·1·4 + 2·1 = 4; w = 1 - (-4 + 2) / (5 + 4) = 11/9. q = 0: Δ = Δw, h = L: the plain mean, 1."""
    assert _q_fedavg(0.5) == pytest.approx(11 / 9, abs=1e-15)
    assert _q_fedavg(0.0) == 1.0


def test_a_q_fedavg_client_reports_its_loss_before_training_and_no_other_client_does():
    rng = np.random.default_rng(0)
    x, y = rng.random((30, 64)), rng.integers(0, 10, 30)
    params = [rng.normal(size=(64, 10)), np.zeros(10)]
    reported = {}
    for strategy in ("qfedavg", "fedavg"):
        training = {"rounds": 1, "local_epochs": 1, "learning_rate": 0.5, "strategy": strategy}
        config = ExperimentConfig.model_validate(base_config() | {"hooks": None, "training": training})
        reported[strategy] = client_update(config, Hooks(), 0, 1, params, x, y).metrics.get(LOSS_BEFORE_TRAINING)
    assert reported["fedavg"] is None
    assert reported["qfedavg"] == pytest.approx(load_model(config.model).evaluate(params, x, y).loss, rel=1e-12)
