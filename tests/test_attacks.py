"""Malicious clients (``attack``): what an attacked client sends, that every backend sends the same, and what a robust
aggregator does about it."""

from __future__ import annotations

import json
import subprocess

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml

from fltest.attacks import attacked
from fltest.config.attacks import GaussianAttack, ScaledAttack, SignFlipAttack
from fltest.config.schema import ExperimentConfig
from fltest.fedavg import client_update
from fltest.hooks import Hooks
from fltest.params import load_params
from fltest.results.compare import ATTACK_FREE
from fltest.results.report import draw_report
from fltest.runner import run_experiment
from tests.conftest import base_config
from tests.doc_blocks import doc_block, run_block, user_checkout
from tests.user_folder import FLTEST

GLOBAL = [np.array([1.0, 2.0]), np.array(3.0)]
HONEST = [np.array([1.5, 1.0]), np.array(3.25)]  # a change of +0.5, -1 and +0.25


def test_sign_flip_and_scaled_send_the_global_model_plus_a_multiple_of_the_honest_change():
    flipped = attacked(SignFlipAttack(kind="sign_flip", clients=[0]), 0, 1, 0, GLOBAL, HONEST)
    assert [a.tolist() for a in flipped] == [[0.5, 3.0], 2.75]
    scaled = attacked(ScaledAttack(kind="scaled", clients=[0], factor=4), 0, 1, 0, GLOBAL, HONEST)
    assert [a.tolist() for a in scaled] == [[3.0, -2.0], 4.0]
    assert scaled[1].shape == () and scaled[1].dtype == np.float64  # a 0-d parameter stays one


def test_gaussian_noise_is_drawn_from_the_seed_the_round_and_the_client():
    attack = GaussianAttack(kind="gaussian", clients=[0, 1], std=0.5)
    first = attacked(attack, 7, 2, 0, GLOBAL, HONEST)
    assert all(np.array_equal(a, b) for a, b in zip(first, attacked(attack, 7, 2, 0, GLOBAL, HONEST)))  # repeats
    for other in (attacked(attack, 7, 2, 1, GLOBAL, HONEST), attacked(attack, 7, 3, 0, GLOBAL, HONEST)):
        assert not np.array_equal(first[0], other[0])
    noise = np.concatenate(
        [attacked(attack, 7, r, 0, [np.zeros(1000)], [np.zeros(1000)])[0] for r in range(1, 11)]
    )  # 10,000 draws: their spread is the std asked for
    assert abs(noise.std() - 0.5) < 0.02 and abs(noise.mean()) < 0.02


def test_only_the_attack_s_clients_tamper_and_their_hooks_see_their_honest_model():
    config = ExperimentConfig.model_validate(
        base_config() | {"hooks": None, "attack": {"kind": "scaled", "clients": [1], "factor": 3.0}}
    )
    seen = {}
    hooks = Hooks(after_local_training=lambda pid, rnd, old, new: seen.setdefault(pid, new) and {})
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 64)), rng.integers(0, 10, 40)
    start = [np.zeros((64, 10)), np.zeros(10)]
    honest = client_update(config, hooks, 0, 1, start, x, y).params
    tampered = client_update(config, hooks, 1, 1, start, x, y).params
    assert all(np.array_equal(a, b) for a, b in zip(seen[0], honest))  # client 0 sends what it trained
    # client 1's hook saw what it trained; w_t = 0, so it sends 3 times that
    assert all(np.allclose(t, 3.0 * h) and not np.allclose(t, h) for t, h in zip(tampered, seen[1]))


def test_a_scaled_attack_breaks_fedavg_and_not_the_median(tmp_path):
    """Two of ten clients magnify their change 30 times: FedAvg's model is ruined, the coordinate-wise median's is
    not (measured: 0.14 and 0.88 accuracy after 5 rounds; 0.89 and 0.87 without the attack)."""
    accuracy = {}
    for strategy in ("fedavg", "fedmedian"):
        data = base_config()
        data["training"].update(rounds=5, local_epochs=1, strategy=strategy)
        data.update(name=f"attack-{strategy}", hooks=None, attack={"kind": "scaled", "clients": [0, 1], "factor": 30})
        comparison = run_experiment(ExperimentConfig.model_validate(data), tmp_path)
        accuracy[strategy] = comparison["runs"][0]["accuracy"]
    assert accuracy["fedavg"] < 0.5 < 0.8 < accuracy["fedmedian"], accuracy


def test_an_attacked_experiment_gives_each_run_s_distance_from_the_attack_free_model(tmp_path):
    """Under an attack, ``fltest run`` also runs the reference without it (``_attack-free``): comparison.json gives each
    run's L2 distance from that model after each round (0 for itself; above 0 from round 1 for the attacked reference,
    and after the last round the distance of the final models), the table gives the last one, the reference stays the
    run compared with, and the report draws the distances."""
    data = base_config()
    data["training"].update(rounds=2, local_epochs=1)
    data.update(name="attack-distance", clients=4, hooks=None, attack={"kind": "sign_flip", "clients": [0]})
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(data))
    result = subprocess.run([FLTEST, "run", "exp.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    experiment = tmp_path / "results" / "attack-distance"
    comparison = json.loads((experiment / "comparison.json").read_text())
    runs = {row["run"]: row for row in comparison["runs"]}
    assert list(runs) == ["reference", ATTACK_FREE] and comparison["reference_run"] == "reference"
    assert runs[ATTACK_FREE]["distance_from_attack_free_per_round"] == [0.0, 0.0]
    attacked_distances = runs["reference"]["distance_from_attack_free_per_round"]
    assert len(attacked_distances) == 2 and min(attacked_distances) > 0, attacked_distances
    attacked, attack_free = (load_params(experiment / run / "model_final.npz") for run in ("reference", ATTACK_FREE))
    final = np.linalg.norm(np.concatenate([(a - b).ravel() for a, b in zip(attacked, attack_free, strict=True)]))
    assert attacked_distances[-1] == runs["reference"]["distance_from_attack_free"] == pytest.approx(final, rel=1e-12)
    header, _, *rows = result.stdout.splitlines()[:4]
    assert header.rstrip().endswith("vs reference  L2 to attack-free"), header
    cells = rows[1].split()  # the attack-free run: not compared with the reference, 0 from itself
    assert cells[:4] == [ATTACK_FREE, "reference", "completed", "2"] and cells[7:] == ["-", "-", "-", "0.0000"], cells
    assert (experiment / "report.png").read_bytes().startswith(b"\x89PNG")
    figure = draw_report(experiment)
    titles = [axis.get_title() for axis in figure.axes]
    assert titles[-1] == "distance from the attack-free model" and len(titles) == 5, titles
    drawn = {line.get_label().split(" (")[0]: list(line.get_ydata()) for line in figure.axes[-1].get_lines()}
    assert drawn == {"reference": attacked_distances, "attack-free": [0.0, 0.0]}
    assert "attack-free" in [line.get_label() for line in figure.axes[0].get_lines()]  # the baseline's accuracy
    plt.close(figure)


@pytest.mark.parametrize(
    ("attack", "message"),
    [
        ({"kind": "scaled", "clients": [0, 12]}, "attack.clients: 12 is not a client (0..9)"),
        ({"kind": "scaled", "clients": [1, 1]}, "attack.clients: 1 twice"),
        ({"kind": "scaled", "clients": []}, "attack.scaled.clients"),
        ({"kind": "gaussian", "clients": [0], "std": 0}, "attack.gaussian.std"),
        ({"kind": "gaussian", "clients": [0], "factor": 2}, "attack.gaussian.factor"),
        ({"kind": "boom", "clients": [0]}, "attack: Input tag 'boom'"),
    ],
)
def test_a_bad_attack_is_one_line_naming_the_file_and_field_and_exit_2(tmp_path, attack, message):
    config = base_config() | {"attack": attack}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([FLTEST, "validate", "exp.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"fltest: error: exp.yaml: {message}"), (
        result.stderr
    )


def _framework_config(name: str, framework: str, strategy: str, attack: dict) -> ExperimentConfig:
    data = base_config()
    data["training"].update(rounds=3, local_epochs=1, strategy=strategy)
    data.update(
        name=name,
        clients=4,
        total_cpus=2,
        hooks=None,
        attack=attack,
        output={"save_round_models": True},
        runs=[{"name": "reference", "framework": "reference"}, {"name": framework, "framework": framework}],
    )
    return ExperimentConfig.model_validate(data)


@pytest.mark.ray
def test_flower_s_attacked_clients_send_what_the_reference_s_do(tmp_path, monkeypatch):
    monkeypatch.delenv("FLTEST_RAY_ADDRESS", raising=False)
    config = _framework_config("attack-flower", "flwr", "fedmedian", {"kind": "gaussian", "clients": [2], "std": 0.3})
    row = run_experiment(config, tmp_path)["runs"][1]
    assert row["status"] == "completed" and row["param_diff_per_round"] == [0.0] * 3, row


@pytest.mark.nvflare
def test_nvflare_s_attacked_clients_send_what_the_reference_s_do(tmp_path):
    config = _framework_config("attack-nvflare", "nvflare", "fedavg", {"kind": "sign_flip", "clients": [0, 3]})
    row = run_experiment(config, tmp_path)["runs"][1]
    assert row["status"] == "completed" and row["param_diff_per_round"] == [0.0] * 3, row


@pytest.mark.ray
def test_the_attacks_page_s_example_runs_as_written(tmp_path):
    """docs/how-to/attacks.md's block in a copy of the checkout: Flower's FedMedian under the attack is the reference's
    model, NVFlare says why it did not run, and the median held (accuracy measured: 0.90)."""
    folder = user_checkout(tmp_path / "fltest")
    result = run_block(doc_block("attacks/run"), cwd=folder, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads((folder / "results" / "digits-attack" / "comparison.json").read_text())
    runs = {row["run"]: row for row in comparison["runs"]}
    assert runs["flower"]["agreement"] == "identical", runs["flower"]
    assert runs["nvflare"]["status"] == "unsupported" and "no fedmedian" in runs["nvflare"]["reason"], runs["nvflare"]
    assert runs["reference"]["accuracy"] > 0.8, runs["reference"]
