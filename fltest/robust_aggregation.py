"""The reference's robust aggregators: a global model that a few clients sending anything cannot move far.

Each is written from its paper, unweighted (the papers give every client one vote), over the round's updates in
partition order:

- the coordinate-wise median and trimmed mean (Yin, Chen, Ramchandran and Bartlett, 2018, "Byzantine-Robust
  Distributed Learning: Towards Optimal Statistical Rates", Definitions 1 and 2);
- Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui and Stainer, 2017, "Machine Learning with Adversaries:
  Byzantine Tolerant Gradient Descent", Section 4), applied to the clients' models as Flower applies them;
- Bulyan (El Mhamdi, Guerraoui and Rouault, 2018), over Krum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fltest.config.strategies import BulyanStrategy, FedTrimmedAvgStrategy, KrumStrategy, MultiKrumStrategy
from fltest.fedavg import ClientUpdate
from fltest.params import Params, shaped_like


def _stacked(updates: Sequence[ClientUpdate], index: int) -> np.ndarray:
    """Parameter ``index`` of every update, one row a client (float64, as parameters travel)."""
    return np.stack([np.asarray(update.params[index], dtype=np.float64) for update in updates])


class CoordinateMedian:
    """FedMedian: ``w_{t+1}[j] = median_k w_k[j]`` for every coordinate ``j`` (the mean of the two middle values when
    the clients are even in number)."""

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The coordinate-wise median of the clients' models."""
        medians = [np.median(_stacked(updates, i), axis=0) for i in range(len(global_params))]
        return shaped_like(medians, global_params)


class TrimmedMean:
    """FedTrimmedAvg: for every coordinate, the ``b = ⌊β n⌋`` largest and ``b`` smallest of the n clients' values are
    removed and the other ``n - 2b`` averaged."""

    def __init__(self, strategy: FedTrimmedAvgStrategy) -> None:
        self.beta = strategy.beta

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The coordinate-wise trimmed mean of the clients' models."""
        cut = int(self.beta * len(updates))
        means = [
            np.mean(np.sort(_stacked(updates, i), axis=0)[cut : len(updates) - cut], axis=0)
            for i in range(len(global_params))
        ]
        return shaped_like(means, global_params)


def _distances(updates: Sequence[ClientUpdate]) -> np.ndarray:
    """The squared Euclidean distance between every two updates' models (all their parameters, one vector each)."""
    vectors = [np.concatenate([np.ravel(p) for p in update.params]) for update in updates]
    return np.array([[float(np.sum((v - w) ** 2)) for w in vectors] for v in vectors])


def krum_scores(distances: np.ndarray, malicious: int) -> np.ndarray:
    """Each model's Krum score from the models' squared distances: its summed distance to its ``n - f - 2`` nearest
    others (at least one, and none when it is alone)."""
    count = len(distances)
    nearest = min(max(1, count - malicious - 2), count - 1)
    return np.array([np.sort(np.delete(row, i))[:nearest].sum() for i, row in enumerate(distances)])


class KrumSelection:
    """Krum and Multi-Krum: each client model ``V_i`` (all its parameters, one vector) scores
    ``s(i) = Σ_{j ∈ N_i} ‖V_i - V_j‖²`` over its ``n - f - 2`` nearest other models ``N_i``; Krum's global model is the
    model of the smallest score, Multi-Krum's the plain mean of the ``m`` smallest (ties: the lower partition)."""

    def __init__(self, strategy: KrumStrategy) -> None:
        self.malicious = strategy.num_malicious
        self.selected = strategy.num_selected if isinstance(strategy, MultiKrumStrategy) else 1

    def scores(self, updates: Sequence[ClientUpdate]) -> np.ndarray:
        """Each update's Krum score, in the updates' order."""
        return krum_scores(_distances(updates), self.malicious)

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The selected model (Krum) or the mean of the selected models (Multi-Krum), summed in partition order."""
        chosen = sorted(np.argsort(self.scores(updates), kind="stable")[: self.selected])
        means = [np.mean(_stacked([updates[k] for k in chosen], i), axis=0) for i in range(len(global_params))]
        return shaped_like(means, global_params)


class Bulyan:
    """Bulyan (El Mhamdi, Guerraoui and Rouault, 2018, "The Hidden Vulnerability of Distributed Learning in
    Byzantium", Section 4), over Krum: ``θ = n - 2f`` models are chosen one at a time, each the Krum choice among those
    left; then each coordinate of the new model is the mean of the ``β = θ - 2f`` chosen values closest to their
    median (ties: the lower partition)."""

    def __init__(self, strategy: BulyanStrategy) -> None:
        self.malicious = strategy.num_malicious

    def chosen(self, updates: Sequence[ClientUpdate]) -> list[int]:
        """The indices of the ``θ`` models Krum chooses one after another, in partition order."""
        left, distances = list(range(len(updates))), _distances(updates)  # once: the rounds below take subsets
        chosen = []
        for _ in range(len(updates) - 2 * self.malicious):
            best = left[int(np.argmin(krum_scores(distances[np.ix_(left, left)], self.malicious)))]
            chosen.append(best)
            left.remove(best)
        return sorted(chosen)

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The coordinate-wise mean of the ``β`` chosen values closest to their median."""
        chosen = [updates[k] for k in self.chosen(updates)]
        beta = len(chosen) - 2 * self.malicious
        means = []
        for i in range(len(global_params)):
            values = _stacked(chosen, i)
            closest = np.argsort(np.abs(values - np.median(values, axis=0)), axis=0, kind="stable")[:beta]
            means.append(np.mean(np.take_along_axis(values, np.sort(closest, axis=0), axis=0), axis=0))
        return shaped_like(means, global_params)
