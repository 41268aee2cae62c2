"""When a Ray cluster pays off: a model of a synchronous Flower round on nodes of equal CPUs, fitted by measurement.

A round's seconds on ``k`` nodes is modelled as

    driver_s + driver_per_client_s * N + (per_client_s * N + per_sample_epoch_s * E * S) / k
    + remote_per_sample_s * S * (k - 1) / k

for N clients training E local epochs over S samples in all: the driver's part (Flower's round, aggregation,
evaluation) runs once, whatever the nodes; each client's start and its training are spread over the nodes;
the clients that run on a node other than the driver's fetch their shards over the network. Every term is a
non-negative least-squares fit to ``bench/cluster_payoff.py``'s grid (:func:`fit_round_model`);
:data:`MEASURED` is the kit's own, from that bench on the 2-core machine (docs/explanation/cluster-payoff.md).

A finished run on a cluster knows its own round time, so :func:`one_node_round_s` takes the training's cost from
it rather than from the benchmark's model, and predicts that round on one of the cluster's nodes.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np


@dataclass(frozen=True)
class Workload:
    """What a round does: ``clients`` clients train ``epochs`` local epochs over ``samples`` samples in all."""

    clients: int
    epochs: int
    samples: int


@dataclass(frozen=True)
class RoundModel:
    """The seconds of each term of a round (see the module's docstring)."""

    driver_s: float
    driver_per_client_s: float
    per_client_s: float
    per_sample_epoch_s: float
    remote_per_sample_s: float

    def round_s(self, work: Workload, nodes: int) -> float:
        """The model's seconds for a round of ``work`` on ``nodes`` nodes."""
        return float(np.dot(astuple(self), _terms(work, nodes)))


#: Fitted to bench/cluster_payoff.py's grid on the kit's Ray emulation, 2026-12-07 (docs/explanation/cluster-payoff.md):
#: 4, 20 and 120 clients, 1, 5 and 20 local epochs, 50,000 CIFAR-shaped training samples, logreg.
MEASURED = RoundModel(
    driver_s=0.426,
    driver_per_client_s=0.0145,
    per_client_s=0.0,
    per_sample_epoch_s=5.9e-6,
    remote_per_sample_s=1.56e-5,
)
#: One node counts as faster only when its predicted round is at most this share of the measured one: the model's
#: rounds are off by up to 1 s on its own grid, and a hint that is wrong is worse than none.
CLEARLY_FASTER = 0.8


def _terms(work: Workload, nodes: int) -> list[float]:
    """The factor of each of :class:`RoundModel`'s terms, in its order."""
    spread = 1 / nodes
    return [
        1.0,
        work.clients,
        work.clients * spread,
        work.epochs * work.samples * spread,
        work.samples * (1 - spread),
    ]


def fit_round_model(measured: list[tuple[Workload, int, float]]) -> RoundModel:
    """The :class:`RoundModel` (every term at least 0) closest to ``(workload, nodes, round seconds)`` measurements."""
    from scipy.optimize import nnls  # scipy comes with scikit-learn; only the benchmark fits

    terms = np.array([_terms(work, nodes) for work, nodes, _ in measured])
    seconds = np.array([round_s for _, _, round_s in measured])
    scale = terms.max(axis=0)  # columns of one size, so that no term is lost to the others' units
    coefficients, _ = nnls(terms / scale, seconds)
    return RoundModel(*(coefficients / scale))


def one_node_round_s(model: RoundModel, work: Workload, nodes: int, round_s: float) -> float:
    """A round of ``work`` on one node, from the same round measured (``round_s``) on ``nodes`` nodes.

    The clients' part of the measured round (what the model does not put on the driver or the network) is
    what one node would run ``nodes`` times over; the driver's part stays the same and the network's goes.
    """
    driver = model.driver_s + model.driver_per_client_s * work.clients
    remote = model.remote_per_sample_s * work.samples * (1 - 1 / nodes)
    clients = max(0.0, round_s - driver - remote)
    return driver + clients * nodes


def clearly_faster_on_one_node(model: RoundModel, work: Workload, nodes: int, round_s: float) -> float | None:
    """:func:`one_node_round_s` when it is at most :data:`CLEARLY_FASTER` of the measured ``round_s``, else ``None``."""
    one_node = one_node_round_s(model, work, nodes, round_s)
    return one_node if one_node <= CLEARLY_FASTER * round_s else None
