"""Differential privacy (``training.privacy``): the reference's DP-FedAvg worked by hand, checked against Flower's own
functions and its wrappers' runs, the noise and the privacy spent, and the bad configs refused."""

from __future__ import annotations

import json
import math
import subprocess

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml
from flwr.supercore.differential_privacy import add_gaussian_noise_inplace, compute_clip_model_update
from numpy.random import RandomState
from nvflare.apis.dxo import DXO, DataKind, MetaKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.app_common.filters.percentile_privacy import PercentilePrivacy

from fltest.config.privacy import AdaptiveClipping, ExcludedParameters, FixedClipping, LocalGaussian
from fltest.config.schema import ExperimentConfig
from fltest.fedavg import ClientUpdate
from fltest.params import load_params
from fltest.privacy.accounting import epsilon_spent
from fltest.privacy.averaging import PrivateAveraging, model_noise_multiplier
from fltest.privacy.clipping import clip_to_norm
from fltest.privacy.local import local_noise_seed, local_noise_stdv, sent_privately
from fltest.privacy.noise import global_generator_seeded, noise_generator, with_gaussian_noise
from fltest.privacy.sharing import shared_change, shared_part
from fltest.results.files import read_jsonl
from fltest.results.report import draw_report
from fltest.runner import run_experiment
from tests.conftest import base_config
from tests.doc_blocks import doc_block, run_block, user_checkout
from tests.user_folder import FLTEST

GLOBAL = [np.array([1.0, 1.0]), np.array([0.0])]


def _update(partition_id: int, change: list[float]) -> ClientUpdate:
    """A client whose model is GLOBAL plus ``change`` (two weights, one bias), trained on ``10 + partition_id`` rows."""
    params = [GLOBAL[0] + np.array(change[:2]), GLOBAL[1] + np.array(change[2:])]
    return ClientUpdate(partition_id, params, num_examples=10 + partition_id)


def test_a_change_longer_than_the_clipping_norm_is_scaled_down_to_it():
    clipped, was_clipped = clip_to_norm(GLOBAL, _update(0, [3.0, 0.0, 4.0]).params, 1.0)  # ‖Δ‖ = 5
    assert was_clipped
    np.testing.assert_allclose(clipped[0], [1.6, 1.0])
    np.testing.assert_allclose(clipped[1], [0.8])
    kept, was_clipped = clip_to_norm(GLOBAL, _update(0, [3.0, 0.0, 4.0]).params, 5.0)
    assert not was_clipped and all(np.array_equal(a, b) for a, b in zip(kept, _update(0, [3.0, 0.0, 4.0]).params))


def test_the_clipping_is_flower_s_bit_for_bit():
    rng = np.random.default_rng(0)
    global_params = [rng.normal(size=(64, 10)), rng.normal(size=10)]
    model = [w + rng.normal(scale=0.3, size=w.shape) for w in global_params]
    flower = [w.copy() for w in model]
    compute_clip_model_update(flower, global_params, 0.7)
    ours, was_clipped = clip_to_norm(global_params, model, 0.7)
    assert was_clipped and all(np.array_equal(a, b) for a, b in zip(ours, flower))


def test_the_reference_s_noise_is_the_one_flower_draws_from_the_seeded_global_generator():
    arrays = [np.zeros((5, 3)), np.zeros(3)]
    before = np.random.get_state()[1].copy()
    with global_generator_seeded(42, 3):
        add_gaussian_noise_inplace(arrays, 0.25)
    assert np.array_equal(np.random.get_state()[1], before)  # the global generator is put back
    ours = with_gaussian_noise([np.zeros((5, 3)), np.zeros(3)], 0.25, noise_generator(42, 3))
    assert all(np.array_equal(a, b) for a, b in zip(ours, arrays))
    other_round = with_gaussian_noise([np.zeros(3)], 0.25, noise_generator(42, 4))
    assert not np.array_equal(other_round[0], ours[1])


def test_fixed_clipping_averages_the_clipped_changes_with_equal_weights():
    privacy = FixedClipping(mechanism="fixed_clipping", clipping_norm=1.0, noise_multiplier=0.0)
    server = PrivateAveraging(privacy, clients=2, seed=0)
    # client 0: Δ = (3, 0, 4) clipped to (0.6, 0, 0.8); client 1: Δ = (0, 0.5, 0) kept; weights 1/2 each, not 10:11
    new = server.apply(GLOBAL, [_update(0, [3.0, 0.0, 4.0]), _update(1, [0.0, 0.5, 0.0])])
    np.testing.assert_allclose(new[0], [1.3, 1.25])
    np.testing.assert_allclose(new[1], [0.4])
    released = server.released[0]
    assert (released.clipping_norm, released.noise_std, released.noise_std_expected, released.epsilon) == (
        1.0,
        0.0,
        0.0,
        None,
    )


def test_adaptive_clipping_moves_the_norm_toward_the_target_quantile_as_andrew_et_al_do():
    privacy = AdaptiveClipping(
        mechanism="adaptive_clipping", noise_multiplier=0.0, initial_clipping_norm=1.0, target_quantile=0.5
    )
    server = PrivateAveraging(privacy, clients=4, seed=0)
    every_one_clipped = [_update(i, [3.0, 0.0, 4.0]) for i in range(4)]
    server.apply(GLOBAL, every_one_clipped)  # b̃ = 0: C ← C·exp(-0.2·(0 - 0.5)), it grows
    assert server.clipping_norm == pytest.approx(math.exp(0.1))
    server.apply(GLOBAL, [_update(i, [0.1, 0.0, 0.0]) for i in range(4)])  # b̃ = 1: it shrinks
    assert server.clipping_norm == pytest.approx(math.exp(0.1) * math.exp(-0.1))
    assert [r.clipping_norm for r in server.released] == [1.0, pytest.approx(math.exp(0.1))]


def test_adaptive_clipping_shares_the_noise_multiplier_between_the_model_and_the_count():
    privacy = AdaptiveClipping(mechanism="adaptive_clipping", noise_multiplier=1.0, clipped_count_stddev=2.0)
    # Andrew et al., Theorem 1: z_Δ = (z^-2 - (2σ_b)^-2)^(-1/2) = (1 - 1/16)^(-1/2)
    assert model_noise_multiplier(privacy, 40) == pytest.approx((1 - 1 / 16) ** -0.5)
    by_default = AdaptiveClipping(mechanism="adaptive_clipping", noise_multiplier=1.0)  # σ_b = 40/20 = 2
    assert model_noise_multiplier(by_default, 40) == model_noise_multiplier(privacy, 40)


@pytest.mark.parametrize(("noise_multiplier", "rounds"), [(0.5, 5), (1.1, 100), (4.0, 1)])
def test_the_privacy_spent_is_the_gaussian_mechanism_s_renyi_bound(noise_multiplier, rounds):
    """Mironov (2017): T Gaussian releases of noise multiplier z are (α, Tα/2z²)-RDP; dp-accounting converts with
    ε = min_α Tα/2z² + log((α-1)/α) - (log δ + log α)/(α - 1) (Canonne, Kamath and Steinke, 2020) over its orders.
    Computed here by hand on a fine grid of α, it must be at most dp-accounting's and close to it."""
    delta = 1e-5
    orders = np.linspace(1.01, 512, 200_000)
    by_hand = np.min(
        rounds * orders / (2 * noise_multiplier**2)
        + np.log((orders - 1) / orders)
        - (np.log(delta) + np.log(orders)) / (orders - 1)
    )
    spent = epsilon_spent(noise_multiplier, rounds, delta)
    assert by_hand <= spent + 1e-9 and spent == pytest.approx(by_hand, rel=0.02), (spent, by_hand)
    assert epsilon_spent(0.0, rounds, delta) is None


PRIVACY = {"mechanism": "fixed_clipping", "clipping_norm": 1.0, "noise_multiplier": 0.5}


@pytest.mark.parametrize(
    ("privacy", "strategy", "message"),
    [
        (PRIVACY | {"clipping_norm": 0}, "fedavg", "training.privacy.fixed_clipping.clipping_norm"),
        (PRIVACY | {"noise_multiplier": -1}, "fedavg", "training.privacy.fixed_clipping.noise_multiplier"),
        (PRIVACY | {"side": "both"}, "fedavg", "training.privacy.fixed_clipping.side"),
        ({"mechanism": "laplace"}, "fedavg", "training.privacy: Input tag 'laplace'"),
        (
            {"mechanism": "local_gaussian", "clipping_norm": 1.0, "epsilon": 1.5},
            "fedavg",
            "training.privacy.local_gaussian.epsilon: Input should be less than 1",
        ),
        (
            {"mechanism": "exclude_parameters", "parameters": [1, 1]},
            "fedavg",
            "training.privacy.exclude_parameters.parameters: 1 twice",
        ),
        (
            {"mechanism": "percentile_sharing", "percentile": 101},
            "fedavg",
            "training.privacy.percentile_sharing.percentile",
        ),
        (
            PRIVACY,
            "fedmedian",
            "training.privacy: it works on FedAvg's average of the clients' changes; strategy fedmedian",
        ),
        (
            {"mechanism": "adaptive_clipping", "noise_multiplier": 1.0},
            "fedavg",
            "training.privacy.noise_multiplier: 1 needs clipped_count_stddev above 0.5; its default, clients a "
            "round / 20, is 0.5",
        ),
        (
            {"mechanism": "adaptive_clipping", "noise_multiplier": 1.0, "clipped_count_stddev": 0.4},
            "fedavg",
            "training.privacy.adaptive_clipping.clipped_count_stddev: 0.4 must be above noise_multiplier / 2",
        ),
    ],
)
def test_a_bad_privacy_config_is_one_line_naming_the_file_and_field_and_exit_2(tmp_path, privacy, strategy, message):
    config = base_config()
    config["training"].update(strategy=strategy, privacy=privacy)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([FLTEST, "validate", "exp.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"fltest: error: exp.yaml: {message}"), (
        result.stderr
    )


def test_a_private_run_records_each_round_s_release_from_a_user_folder(tmp_path):
    config = base_config()
    config.pop("hooks")
    config["training"].update(rounds=3, privacy=PRIVACY)
    config["runs"].append({"name": "nvflare", "framework": "nvflare"})
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([FLTEST, "run", "exp.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    experiment = tmp_path / "results" / config["name"]
    records = [json.loads(line) for line in (experiment / "reference" / "metrics.jsonl").read_text().splitlines()]
    released = [r["privacy"] for r in records[1:]]
    assert "privacy" not in records[0] and [r["clipping_norm"] for r in released] == [1.0] * 3
    clients = config["clients"]
    assert all(r["noise_std_expected"] == 0.5 * 1.0 / clients for r in released)
    parameters = sum(np.size(a) for a in np.load(experiment / "reference" / "model_final.npz").values())
    spread = 5 / math.sqrt(2 * parameters)  # 5 standard errors of a standard deviation measured on every parameter
    assert all(abs(r["noise_std"] / r["noise_std_expected"] - 1) < spread for r in released), released
    assert [r["epsilon"] for r in released] == [epsilon_spent(0.5, t, 1e-5) for t in (1, 2, 3)]
    nvflare = json.loads((experiment / "nvflare" / "summary.json").read_text())
    assert nvflare["status"] == "unsupported" and "no fixed_clipping" in nvflare["error"], nvflare


def _flower_config(name: str, privacy: dict, rounds: int = 3) -> ExperimentConfig:
    data = base_config()
    data["training"].update(rounds=rounds, local_epochs=1, privacy=privacy)
    data.update(
        name=name,
        clients=4,
        total_cpus=2,
        hooks=None,
        output={"save_round_models": True},
        runs=[{"name": "reference", "framework": "reference"}, {"name": "flower", "framework": "flwr"}],
    )
    return ExperimentConfig.model_validate(data)


def _released(experiment, run: str) -> list[dict]:
    lines = (experiment / run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["privacy"] for line in lines[1:]]


def test_a_local_client_sends_its_clipped_model_with_the_gaussian_mechanism_s_noise():
    privacy = LocalGaussian(mechanism="local_gaussian", clipping_norm=1.0, epsilon=0.5, delta=1e-5)
    # σ = Δ₂ √(2 ln(1.25/δ)) / ε with Δ₂ = 2C: two clipped models differ by at most the ball's diameter
    assert local_noise_stdv(privacy) == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    (sent,), released = sent_privately(privacy, 7, 2, GLOBAL, [_update(3, [3.0, 0.0, 4.0])])
    clipped = [np.array([1.6, 1.0]), np.array([0.8])]
    noise = with_gaussian_noise(
        [np.zeros(2), np.zeros(1)], local_noise_stdv(privacy), RandomState(local_noise_seed(7, 2, 3))
    )
    assert all(np.array_equal(s, c + n) for s, c, n in zip(sent.params, clipped, noise))
    assert sent.num_examples == 13  # the server weighs it as the strategy does
    assert released.epsilon == epsilon_spent(local_noise_stdv(privacy) / 2.0, 2, 1e-5)


@pytest.mark.ray
@pytest.mark.parametrize("side", ["server", "client"])
def test_flower_s_fixed_clipping_wrappers_seeded_are_the_reference_bit_for_bit(tmp_path, monkeypatch, side):
    """With noise: FLTest seeds the generator Flower draws from; Flower's accountant spends the reference's ε."""
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    config = _flower_config(f"dp-fixed-{side}", PRIVACY | {"side": side})
    row = run_experiment(config, tmp_path)["runs"][1]
    assert row["status"] == "completed" and row["param_diff_per_round"] == [0.0] * 3, row
    experiment = tmp_path / config.name
    assert _released(experiment, "flower") == _released(experiment, "reference")


@pytest.mark.ray
def test_flower_s_adaptive_clipping_moves_the_norm_the_other_way_from_round_2(tmp_path, monkeypatch):
    """Without noise round 1 is the reference's; then Flower's norm moves by the reciprocal of the paper's factor
    (it steers the clipped share where the paper steers the unclipped one), and the models part."""
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    privacy = {"mechanism": "adaptive_clipping", "side": "client", "noise_multiplier": 0.0}
    config = _flower_config("dp-adaptive", privacy, rounds=2)
    row = run_experiment(config, tmp_path)["runs"][1]
    assert row["status"] == "completed" and row["param_diff_per_round"][0] == 0.0, row
    assert row["param_diff_per_round"][1] > 0, row
    experiment = tmp_path / config.name
    reference, flower = (_released(experiment, run) for run in ("reference", "flower"))
    assert reference[0]["clipping_norm"] == flower[0]["clipping_norm"] == 0.1
    assert math.log(flower[1]["clipping_norm"] / 0.1) == pytest.approx(-math.log(reference[1]["clipping_norm"] / 0.1))
    assert reference[1]["clipping_norm"] != 0.1


@pytest.mark.ray
def test_the_privacy_page_s_example_runs_as_written(tmp_path):
    """docs/how-to/privacy.md's block in a copy of the checkout: Flower's seeded wrapper gives the reference's model
    and ε, NVFlare says why it did not run."""
    folder = user_checkout(tmp_path / "fltest")
    result = run_block(doc_block("privacy/run"), cwd=folder, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    experiment = folder / "results" / "digits-privacy"
    runs = {row["run"]: row for row in json.loads((experiment / "comparison.json").read_text())["runs"]}
    assert runs["flower"]["agreement"] == "identical", runs["flower"]
    assert runs["nvflare"]["status"] == "unsupported" and "no fixed_clipping" in runs["nvflare"]["reason"], runs[
        "nvflare"
    ]
    assert _released(experiment, "flower")[-1]["epsilon"] == pytest.approx(30.1, abs=0.05)
    figure = draw_report(experiment)  # the report's privacy/utility panel: each run's accuracy against its ε
    panel = next(axis for axis in figure.axes if axis.get_title() == "test accuracy against ε (δ = 1e-05)")
    lines = {line.get_label(): line for line in panel.get_lines()}
    records = read_jsonl(experiment / "flower" / "metrics.jsonl")[1:]
    assert list(lines["flower"].get_xdata()) == [r["privacy"]["epsilon"] for r in records]
    assert list(lines["flower"].get_ydata()) == [r["test"]["accuracy"] for r in records]
    plt.close(figure)


def test_a_client_shares_the_coordinates_of_its_change_above_the_percentile_bounded_by_gamma():
    # magnitudes 0.1, 0.5, 0.02, 3: their 50th percentile is 0.3; -0.5 and 3 are shared, 3 bounded to 1
    (shared,) = shared_change([np.array([0.1, -0.5, 0.02, 3.0])], percentile=50, gamma=1.0)
    np.testing.assert_array_equal(shared, [0.0, -0.5, 0.0, 1.0])


def _nvflare_filtered(change: dict[str, np.ndarray], steps: int, percentile: float, gamma: float) -> dict:
    """NVFlare's own PercentilePrivacy on a client's change reported with ``steps`` local steps."""
    dxo = DXO(DataKind.WEIGHT_DIFF, {k: v.copy() for k, v in change.items()}, {MetaKey.NUM_STEPS_CURRENT_ROUND: steps})
    return PercentilePrivacy(percentile=percentile, gamma=gamma).process_dxo(dxo, Shareable(), FLContext()).data


def test_nvflare_s_percentile_filter_bounds_the_change_per_local_step():
    """With one step NVFlare's filter is the paper's sharing bit for bit; with s steps it bounds Δ/s, so a client that
    reports s (FLTest's clients report their examples, which NVFlare's FedAvg weighs by) gets the bound γ·s."""
    rng = np.random.default_rng(1)
    change = {"0": rng.normal(scale=0.05, size=(64, 10)), "1": rng.normal(scale=0.05, size=10)}
    reference = dict(zip(change, shared_change(list(change.values()), percentile=30, gamma=0.04)))
    one_step = _nvflare_filtered(change, 1, percentile=30, gamma=0.04)
    assert all(np.array_equal(one_step[k], reference[k]) for k in change)
    many_steps = _nvflare_filtered(change, 40, percentile=30, gamma=0.04)
    loose = dict(zip(change, shared_change(list(change.values()), percentile=30, gamma=0.04 * 40)))
    assert all(np.allclose(many_steps[k], loose[k], rtol=1e-15, atol=0) for k in change)
    assert not np.allclose(many_steps["0"], reference["0"])  # the paper's γ bounds some of them


def test_excluded_parameters_share_no_change():
    sharing = ExcludedParameters(mechanism="exclude_parameters", parameters=[1])
    change = [np.array([0.5, -0.25]), np.array([2.0])]
    shared = shared_part(sharing, change)
    assert np.array_equal(shared[0], change[0]) and np.array_equal(shared[1], [0.0])


@pytest.mark.parametrize("command", ["validate", "run"])
def test_an_excluded_parameter_the_model_lacks_is_one_line_naming_the_file_and_field_and_exit_2(tmp_path, command):
    config = base_config()
    config.pop("hooks")
    config["training"]["privacy"] = {"mechanism": "exclude_parameters", "parameters": [0, 2]}  # logreg has 2
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([FLTEST, command, "exp.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "fltest: error: exp.yaml: training.privacy.parameters: 2 is not a parameter of the model, which has 2 (0..1)"
    ), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "results").exists()


@pytest.mark.nvflare
@pytest.mark.parametrize(
    ("privacy", "largest_difference"),
    [
        ({"mechanism": "percentile_sharing", "percentile": 50, "gamma": 1e9}, 1e-15),
        ({"mechanism": "exclude_parameters", "parameters": [1]}, 0.0),
    ],
)
def test_nvflare_runs_its_own_filter_on_what_each_client_sends(tmp_path, privacy, largest_difference):
    """NVFlare's PercentilePrivacy, without a bound in reach (γ 1e9), shares what the reference's sharing does: within
    1e-15, the change divided by its steps and multiplied back; its ExcludeVars withholds what the reference's does,
    bit for bit, the biases staying at their initial values. (A filter of NVFlare's default tasks ["*"] never runs: its
    model was FedAvg's.)"""
    data = base_config()
    data["training"].update(rounds=3, local_epochs=1, privacy=privacy)
    data.update(
        name="sharing-nvflare",
        clients=4,
        total_cpus=2,
        hooks=None,
        runs=[{"name": "reference", "framework": "reference"}, {"name": "nvflare", "framework": "nvflare"}],
    )
    row = run_experiment(ExperimentConfig.model_validate(data), tmp_path)["runs"][1]
    assert row["status"] == "completed" and max(row["param_diff_per_round"]) <= largest_difference, row
    if privacy["mechanism"] == "exclude_parameters":
        models = tmp_path / "sharing-nvflare" / "nvflare"
        assert np.array_equal(load_params(models / "model_final.npz")[1], np.zeros(10))  # logreg's biases start at 0


@pytest.mark.ray
def test_flower_s_local_dp_mod_seeded_is_the_reference_whatever_the_client_s_code_draws(tmp_path, monkeypatch):
    """Flower's LocalDpMod draws its noise from numpy's global generator, which FLTest seeds once the client has
    trained: a hook drawing from that generator changes nothing, and the model is the reference's bit for bit."""
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    (tmp_path / "drawing_hooks.py").write_text(
        "import numpy as np\n"
        "def after_local_training(partition_id, server_round, global_params, params):\n"
        "    return {'drawn': float(np.random.normal())}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    privacy = {"mechanism": "local_gaussian", "clipping_norm": 1.0, "epsilon": 0.9}
    config = _flower_config("dp-local", privacy).model_copy(update={"hooks": "drawing_hooks"})
    row = run_experiment(config, tmp_path)["runs"][1]
    assert row["status"] == "completed" and row["param_diff_per_round"] == [0.0] * 3, row
    reference, flower = (_released(tmp_path / config.name, run) for run in ("reference", "flower"))
    assert [r["noise_std"] for r in flower] == [None] * 3 and [r["epsilon"] for r in flower] == [None] * 3
    assert [r["noise_std_expected"] for r in flower] == [r["noise_std_expected"] for r in reference]
