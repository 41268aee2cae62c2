"""The reference backend: it learns, it is bit-for-bit reproducible, hooks and sampling work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from fltest.config.schema import ExperimentConfig
from fltest.fedavg import ClientUpdate, aggregate, client_update, select_clients
from fltest.hooks import Hooks
from fltest.params import load_params
from fltest.runner import run_experiment
from tests.conftest import REPO, base_config


def _run(tmp_path, name="exp", **training):
    data = base_config()
    data["name"] = name
    data["training"].update(training)
    data["output"] = {"save_round_models": True}
    config = ExperimentConfig.model_validate(data)
    comparison = run_experiment(config, tmp_path / "results")
    return comparison, tmp_path / "results" / name / "reference"


@pytest.fixture(autouse=True)
def _hooks_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))


def test_reference_learns_digits_above_85_percent(tmp_path):
    comparison, run_dir = _run(tmp_path)
    assert comparison["runs"][0]["status"] == "completed"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert records[0]["test"]["accuracy"] < 0.3
    assert records[-1]["test"]["accuracy"] > 0.85
    assert records[-1]["test"]["loss"] < records[0]["test"]["loss"]


def test_same_seed_same_models_bit_for_bit(tmp_path):
    _, first = _run(tmp_path / "a")
    _, second = _run(tmp_path / "b")
    round_files = sorted((first / "models").iterdir())
    assert [f.name for f in round_files] == [f.name for f in sorted((second / "models").iterdir())]
    assert len(round_files) == 6  # rounds 0..5: the loop below compares every one
    for round_file in round_files:
        for p, q in zip(load_params(round_file), load_params(second / "models" / round_file.name)):
            assert p.dtype == np.float64 and np.array_equal(p, q)


def test_results_hold_the_validated_config_the_final_model_and_the_comparison(tmp_path):
    comparison, run_dir = _run(tmp_path)
    experiment = run_dir.parent
    saved = yaml.safe_load(
        (experiment / "config.yaml").read_text()
    )  # as written: validating it would refill the defaults
    validated = ExperimentConfig.model_validate({**base_config(), "name": "exp", "output": {"save_round_models": True}})
    assert saved == validated.model_dump(mode="json")  # every field, defaults included
    assert saved["output"]["dir"] == "results" and saved["training"]["strategy"] == {
        "name": "fedavg"
    }  # not in the input
    assert saved["runs"] == [{"name": "reference", "framework": "reference", "options": {}}]
    last_round = load_params(run_dir / "models" / "round-0005.npz")
    final = load_params(run_dir / "model_final.npz")
    assert len(final) == len(last_round) and all(np.array_equal(p, q) for p, q in zip(final, last_round))
    assert json.loads((experiment / "comparison.json").read_text()) == comparison
    assert [r["run"] for r in comparison["runs"]] == ["reference"]


def test_hooks_add_client_and_test_metrics(tmp_path):
    _, run_dir = _run(tmp_path)
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0.0 < last["test"]["macro_f1"] <= 1.0
    assert last["train"]["update_norm"] > 0.0


def test_fraction_fit_selects_a_seeded_subset(tmp_path):
    _, run_dir = _run(tmp_path, fraction_fit=0.3)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    chosen = [tuple(r["clients"]) for r in records[1:]]
    assert all(len(c) == 3 for c in chosen)
    assert len(set(chosen)) > 1  # different clients in different rounds
    assert chosen[0] == tuple(select_clients(10, 0.3, 42, 1))


def test_local_steps_bound_the_work(tmp_path):
    _, run_dir = _run(tmp_path, local_epochs=None, local_steps=3)
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["train"]["steps"] == 3.0


def test_aggregate_weights_by_examples():
    one = ClientUpdate(0, [np.array([0.0, 0.0])], 1, {"train_loss": 1.0})
    three = ClientUpdate(1, [np.array([4.0, 8.0])], 3, {"train_loss": 2.0})
    params, metrics = aggregate([one, three])
    assert np.allclose(params[0], [3.0, 6.0])
    assert metrics == {"train_loss": 1.75}


def test_a_hook_that_replaces_the_data_is_what_clients_train_on(tmp_path, monkeypatch):
    """``before_local_training`` returning ``(features, labels)``: client ``p`` trains on its first ``p + 1`` rows, all labelled 7.

    With one row a batch a client takes one step a row, and the round's ``steps`` are averaged weighted by
    each client's examples, the replaced ones: (1*1 + 2*2 + 3*3 + 4*4) / (1 + 2 + 3 + 4) = 3.
    """
    (tmp_path / "replacing_hooks.py").write_text(
        "import numpy as np\n"
        "def before_local_training(partition_id, server_round, features, labels):\n"
        "    return features[: partition_id + 1], np.full(partition_id + 1, 7)\n"
        "def evaluate_metrics(labels, probabilities):\n"
        "    return {'predicted_7': float(np.mean(probabilities.argmax(axis=1) == 7))}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = base_config()
    data.update(name="replaced", clients=4, hooks="replacing_hooks")
    data["training"].update(rounds=2, local_epochs=1, batch_size=1)
    run_experiment(ExperimentConfig.model_validate(data), tmp_path / "results")
    records = [
        json.loads(line)
        for line in (tmp_path / "results" / "replaced" / "reference" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["train"]["steps"] for r in records[1:]] == [3.0, 3.0]
    assert records[-1]["test"]["predicted_7"] == 1.0  # trained on sevens only, it sees sevens everywhere


def test_after_local_training_gets_the_old_model_then_the_new_one():
    """own-model.md: ``after_local_training(partition_id, server_round, old_params, new_params)``, in that order (a
    hook whose result is symmetric in the two, as the example's update norm, would not tell)."""
    config = ExperimentConfig.model_validate({**base_config(), "hooks": None})
    seen = {}

    def after_local_training(partition_id, server_round, old_params, new_params):
        seen.update(old=old_params, new=new_params)
        return {}

    start = [np.zeros((64, 10)), np.zeros(10)]
    rng = np.random.default_rng(0)
    features, labels = rng.random((20, 64)), np.arange(20) % 10
    update = client_update(config, Hooks(after_local_training=after_local_training), 0, 1, start, features, labels)
    assert seen["old"] is start
    assert all(np.array_equal(a, b) for a, b in zip(seen["new"], update.params))
    assert not all(np.array_equal(a, b) for a, b in zip(seen["new"], start))  # it trained: the two differ
