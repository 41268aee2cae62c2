"""Local differential privacy, the reference's way: each client clips its change and noises the model it sends.

A client of round ``t`` sends ``w_t + clip(Δ_k, C) + N(0, σ²)`` on every coordinate, with the Gaussian mechanism's
``σ = Δ₂·√(2 ln(1.25/δ))/ε`` (Dwork and Roth 2014, Theorem A.1, for ε < 1) and ``Δ₂ = 2C``: whatever a client's data,
its clipped model lies within ``C`` of ``w_t``, so two of them differ by at most ``2C``. Its noise is drawn from the
experiment's seed, the round and the client (:func:`local_noise_seed`), so a run repeats; the server averages what
it receives as the strategy does. Each client's releases compose over the rounds as any Gaussian mechanism's of
noise multiplier ``σ/Δ₂`` (:func:`fltest.privacy.accounting.epsilon_spent`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fltest.config.privacy import LocalGaussian
from fltest.fedavg import ClientUpdate
from fltest.params import Params
from fltest.privacy.accounting import epsilon_spent
from fltest.privacy.clipping import clip_to_norm
from fltest.privacy.noise import measured_stdv, with_gaussian_noise
from fltest.rounds import RoundPrivacy


def sensitivity(privacy: LocalGaussian) -> float:
    """Δ₂: the largest L2 distance between two clipped models a client may send, ``2C``."""
    return 2 * privacy.clipping_norm


def local_noise_stdv(privacy: LocalGaussian) -> float:
    """σ: the standard deviation of the noise on each coordinate a client sends."""
    return float(sensitivity(privacy) * np.sqrt(2 * np.log(1.25 / privacy.delta)) / privacy.epsilon)


def local_noise_seed(seed: int, server_round: int, partition_id: int) -> int:
    """The seed of client ``partition_id``'s noise in round ``server_round``, drawn from the experiment's ``seed``."""
    return int(np.random.SeedSequence([seed, 8, server_round, partition_id]).generate_state(1)[0])


def released(privacy: LocalGaussian, server_round: int, noise_std: float | None) -> RoundPrivacy:
    """What round ``server_round`` released (``noise_std``: as measured, where it can be seen)."""
    return RoundPrivacy(
        clipping_norm=privacy.clipping_norm,
        noise_std=noise_std,
        noise_std_expected=local_noise_stdv(privacy),
        epsilon=epsilon_spent(local_noise_stdv(privacy) / sensitivity(privacy), server_round, privacy.delta),
        delta=privacy.delta,
    )


def sent_privately(
    privacy: LocalGaussian, seed: int, server_round: int, global_params: Params, updates: Sequence[ClientUpdate]
) -> tuple[list[ClientUpdate], RoundPrivacy]:
    """What the round's clients send, each its model clipped and noised, and the round's release (the noise measured
    over every coordinate of every client)."""
    sent, every_noised, every_clipped = [], [], []
    for update in updates:
        clipped, _ = clip_to_norm(global_params, update.params, privacy.clipping_norm)
        generator = np.random.RandomState(local_noise_seed(seed, server_round, update.partition_id))
        noised = with_gaussian_noise(clipped, local_noise_stdv(privacy), generator)
        every_noised += noised
        every_clipped += clipped
        sent.append(ClientUpdate(update.partition_id, noised, update.num_examples, update.metrics))
    return sent, released(privacy, server_round, measured_stdv(every_noised, every_clipped))
