"""The line ``fltest run`` ends with when a Flower run on a Ray cluster would likely have been faster on one node.

It reads what the run recorded (its summary: the cluster's address, the nodes its clients trained on, the
training samples; its rounds' times and clients) and asks the round model of
:mod:`fltest.backends.flwr.cluster_payoff` what the same rounds would take on one of those nodes. It changes
nothing; the figures behind it are in docs/explanation/cluster-payoff.md.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fltest.backends.flwr.cluster_payoff import MEASURED, RoundModel, Workload, clearly_faster_on_one_node
from fltest.config.schema import ExperimentConfig
from fltest.results.files import read_jsonl

PAGE = "docs/explanation/cluster-payoff.md"


def cluster_hint(run_dir: Path, config: ExperimentConfig, model: RoundModel = MEASURED) -> str | None:
    """One line when the completed Flower run in ``run_dir`` ran on several Ray nodes and one node would clearly have
    run its later rounds faster; ``None`` otherwise (one machine, one node, one round, a run that did not complete)."""
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        return None
    summary = json.loads(summary_path.read_text())
    hosts = summary.get("client_hosts") or []
    if (
        summary.get("framework") != "flwr"
        or summary.get("status") != "completed"
        or summary.get("ray_address", "local") == "local"
        or len(hosts) < 2
    ):
        return None
    later = [row for row in read_jsonl(run_dir / "metrics.jsonl") if row["round"] >= 2]
    if not later:  # round 1 also holds the actors' start
        return None
    clients = round(statistics.mean(len(row["clients"]) for row in later))
    samples = round(summary["train_samples"] * clients / config.clients)
    work = Workload(clients, config.training.local_epochs, samples)
    measured = statistics.median(row["round_s"] for row in later)
    one_node = clearly_faster_on_one_node(model, work, len(hosts), measured)
    if one_node is None:
        return None
    return (
        f"run {summary['run']}: one node would likely be faster than these {len(hosts)}: about {one_node:.2f} s a "
        f"round against {measured:.2f} s measured ({clients} clients, {config.training.local_epochs} local epochs; "
        f"see {PAGE})"
    )
