"""Partitioners: split training indices over clients, deterministically in a seeded RNG."""

from __future__ import annotations

import numpy as np

from fltest.config.schema import PartitionConfig
from fltest.errors import InputError

_DIRICHLET_TRIES = 100


def iid(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random permutation cut into ``num_clients`` near-equal parts."""
    return [np.sort(part) for part in np.array_split(rng.permutation(num_samples), num_clients)]


def dirichlet(
    labels: np.ndarray, num_clients: int, alpha: float, min_samples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Each class spread over clients in proportions drawn from Dirichlet(alpha).

    Draws again (up to a bound) until every client has at least ``min_samples``.
    """
    classes = np.unique(labels)
    for _ in range(_DIRICHLET_TRIES):
        buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for cls in classes:
            members = rng.permutation(np.flatnonzero(labels == cls))
            proportions = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(proportions)[:-1] * len(members)).astype(int)
            for client, part in enumerate(np.split(members, cuts)):
                buckets[client].append(part)
        parts = [np.sort(np.concatenate(b)) for b in buckets]
        if min(len(p) for p in parts) >= min_samples:
            return parts
    raise InputError(
        f"partition.alpha: Dirichlet({alpha}) left a client with fewer than {min_samples} "
        f"samples in {_DIRICHLET_TRIES} draws; raise alpha or lower clients"
    )


def label_shards(
    labels: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Sort by label, cut into ``num_clients * shards_per_client`` shards, deal them out at random."""
    num_shards = num_clients * shards_per_client
    if num_shards > len(labels):
        raise InputError(
            f"partition.shards_per_client: {num_shards} shards need at least as many "
            f"training samples, there are {len(labels)}"
        )
    tie_break = rng.permutation(len(labels))
    by_label = tie_break[np.argsort(labels[tie_break], kind="stable")]
    shards = np.array_split(by_label, num_shards)
    order = rng.permutation(num_shards)
    return [
        np.sort(np.concatenate([shards[s] for s in order[c * shards_per_client : (c + 1) * shards_per_client]]))
        for c in range(num_clients)
    ]


def partition(labels: np.ndarray, num_clients: int, config: PartitionConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``range(len(labels))`` over ``num_clients`` with the configured method."""
    if num_clients > len(labels):
        raise InputError(f"clients: {num_clients} clients but only {len(labels)} training samples")
    if config.method == "iid":
        parts = iid(len(labels), num_clients, rng)
    elif config.method == "dirichlet":
        parts = dirichlet(labels, num_clients, config.alpha, config.min_samples_per_client, rng)
    else:
        parts = label_shards(labels, num_clients, config.shards_per_client, rng)
    smallest = min(len(p) for p in parts)
    if smallest < config.min_samples_per_client:
        raise InputError(
            f"clients: a client gets {smallest} samples, fewer than "
            f"partition.min_samples_per_client={config.min_samples_per_client}"
        )
    return parts
