"""The round model behind "When the cluster pays off": its fit, its one-node prediction, the hint a cluster run ends with."""

from __future__ import annotations

import json

import pytest

from fltest.backends.flwr.cluster_payoff import RoundModel, Workload, fit_round_model, one_node_round_s
from fltest.config.schema import ExperimentConfig
from fltest.results.cluster_hint import cluster_hint

KNOWN = RoundModel(
    driver_s=0.3, driver_per_client_s=0.002, per_client_s=0.03, per_sample_epoch_s=2e-5, remote_per_sample_s=1e-5
)
GRID = [
    (Workload(clients, epochs, 50_000), nodes) for clients in (4, 20, 120) for epochs in (1, 10) for nodes in (1, 2)
]


def test_the_fit_finds_every_term_of_a_model_from_its_rounds():
    fitted = fit_round_model([(work, nodes, KNOWN.round_s(work, nodes)) for work, nodes in GRID])
    for name in RoundModel.__dataclass_fields__:
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=1e-6), name


def test_the_fit_keeps_every_term_at_or_above_zero():
    """Rounds that get faster with more clients cannot make a client's cost negative."""
    measured = [(work, nodes, 5.0 - 0.01 * work.clients) for work, nodes in GRID]
    fitted = fit_round_model(measured)
    assert min(fitted.__dict__.values()) >= 0


@pytest.mark.parametrize("nodes", [2, 3, 8])
def test_one_node_from_a_round_measured_on_several_is_the_model_s_one_node_round(nodes):
    work = Workload(40, 3, 20_000)
    assert one_node_round_s(KNOWN, work, nodes, KNOWN.round_s(work, nodes)) == pytest.approx(KNOWN.round_s(work, 1))


def _config(local_epochs: int) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": "hint",
            "dataset": {"source": "digits"},
            "clients": 10,
            "training": {"rounds": 3, "local_epochs": local_epochs},
            "runs": [{"name": "flower", "framework": "flwr"}],
        }
    )


def _run_dir(tmp_path, round_s: float, hosts: list[str], ray_address: str = "ray-head:6379"):
    run_dir = tmp_path / "flower"
    run_dir.mkdir()
    summary = {
        "run": "flower",
        "framework": "flwr",
        "status": "completed",
        "ray_address": ray_address,
        "client_hosts": hosts,
        "train_samples": 1_000,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    rounds = [{"round": r, "round_s": round_s, "clients": list(range(10))} for r in (1, 2, 3)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rounds))
    return run_dir


def test_a_cluster_run_whose_rounds_are_mostly_the_driver_s_and_the_network_s_ends_with_the_hint(tmp_path):
    """Rounds of 0.6 s on 2 nodes, of which the model puts 0.2 s on the driver and 0.3 s on the network: the clients'
    share is 0.1 s, twice that on one node, which would take 0.4 s."""
    model = RoundModel(0.2, 0.0, 0.0, 0.0, 6e-4)
    hint = cluster_hint(_run_dir(tmp_path, 0.6, ["head", "worker"]), _config(1), model)
    assert hint == (
        "run flower: one node would likely be faster than these 2: about 0.40 s a round against 0.60 s measured "
        "(10 clients, 1 local epochs; see docs/explanation/cluster-payoff.md)"
    )


@pytest.mark.parametrize(
    ("round_s", "hosts", "address"),
    [
        (5.0, ["head", "worker"], "ray-head:6379"),  # the clients' share dominates: the cluster pays off
        (0.55, ["head", "worker"], "ray-head:6379"),  # one node: 0.5 s, not clearly faster
        (0.5, ["head"], "ray-head:6379"),  # one node ran every client
        (0.5, ["host", "host2"], "local"),  # a private Ray on one machine
    ],
)
def test_no_hint_where_the_cluster_pays_off_is_close_or_was_not_used(tmp_path, round_s, hosts, address):
    model = RoundModel(0.4, 0.0, 0.0, 0.0, 2e-4)
    assert cluster_hint(_run_dir(tmp_path, round_s, hosts, address), _config(1), model) is None
