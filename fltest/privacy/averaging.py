"""DP-FedAvg's server step, written from the papers (the config: :mod:`fltest.config.privacy`).

Round ``t`` with ``m`` clients, global model ``w_t``, clipping norm ``C_t``:

- each client's change is clipped, ``Δ_k = clip(w_k - w_t, C_t)`` (:func:`fltest.privacy.clipping.clip_to_norm`;
  it makes no difference to the model whether the server or the client clips);
- ``w_{t+1} = w_t + (Σ_k Δ_k + N(0, z_Δ² C_t²)) / m``: equal weights, noise on the sum of standard deviation
  ``z_Δ·C_t``, so ``z_Δ·C_t/m`` on the average (McMahan et al., 2018, DP-FedAvg with uniform weights);
- fixed clipping: ``C_{t+1} = C_t`` and ``z_Δ = z``;
- adaptive clipping (Andrew et al., 2021, Algorithm 1): ``b_k = 1`` if client ``k``'s change was not clipped,
  ``b̃ = (Σ_k b_k + N(0, σ_b²)) / m``, ``C_{t+1} = C_t·exp(-η_C (b̃ - γ))``; the noise ``z`` is shared between
  the model and the count, ``z_Δ = (z^-2 - (2σ_b)^-2)^-1/2`` (Theorem 1), ``σ_b = m/20`` unless given.

The noise of round ``t`` is drawn from :func:`fltest.privacy.noise.noise_generator`, the model's arrays first,
then (adaptive) the count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fltest.config.privacy import AdaptiveClipping, NoisedAveraging
from fltest.fedavg import ClientUpdate, aggregate
from fltest.params import Params, shaped_like
from fltest.privacy.accounting import epsilon_spent
from fltest.privacy.clipping import clip_to_norm
from fltest.privacy.noise import measured_stdv, noise_generator, noise_stdv, with_gaussian_noise
from fltest.rounds import RoundPrivacy

#: σ_b's default, as a share of the clients of a round (Andrew et al. suggest m/20).
COUNT_NOISE_SHARE = 1 / 20


def count_noise(privacy: AdaptiveClipping, clients: int) -> float:
    """σ_b: the noise on the count of unclipped changes (the config's, else ``clients/20``; 0 without noise)."""
    if privacy.clipped_count_stddev is not None:
        return privacy.clipped_count_stddev
    return clients * COUNT_NOISE_SHARE if privacy.noise_multiplier > 0 else 0.0


def model_noise_multiplier(privacy: NoisedAveraging, clients: int) -> float:
    """z_Δ: the noise multiplier on the model, ``z`` itself with a fixed clipping norm."""
    z = privacy.noise_multiplier
    if not isinstance(privacy, AdaptiveClipping) or z == 0:
        return z
    return (z**-2 - (2 * count_noise(privacy, clients)) ** -2) ** -0.5


class PrivateAveraging:
    """DP-FedAvg's server with ``clients`` clients a round; :attr:`released` holds what each round released."""

    def __init__(self, privacy: NoisedAveraging, clients: int, seed: int) -> None:
        self.privacy, self.seed = privacy, seed
        adaptive = isinstance(privacy, AdaptiveClipping)
        self.clipping_norm = privacy.initial_clipping_norm if adaptive else privacy.clipping_norm
        self.model_noise = model_noise_multiplier(privacy, clients)
        self.released: list[RoundPrivacy] = []

    def apply(self, global_params: Params, updates: Sequence[ClientUpdate]) -> Params:
        """The next global model: the round's clipped changes averaged with equal weights, noised."""
        server_round = len(self.released) + 1
        clipped, unclipped = [], 0
        for update in updates:
            params, was_clipped = clip_to_norm(global_params, update.params, self.clipping_norm)
            clipped.append(ClientUpdate(update.partition_id, params, num_examples=1))
            unclipped += not was_clipped
        average = aggregate(clipped)[0]
        generator = noise_generator(self.seed, server_round)
        std = noise_stdv(self.model_noise, self.clipping_norm, len(updates))
        noised = with_gaussian_noise(average, std, generator)
        self.released.append(
            RoundPrivacy(
                clipping_norm=self.clipping_norm,
                noise_std=measured_stdv(noised, average),
                noise_std_expected=std,
                epsilon=epsilon_spent(self.privacy.noise_multiplier, server_round, self.privacy.delta),
                delta=self.privacy.delta,
            )
        )
        if isinstance(self.privacy, AdaptiveClipping):
            sigma_b = count_noise(self.privacy, len(updates))
            share = (unclipped + generator.normal(0, sigma_b)) / len(updates)
            self.clipping_norm *= math.exp(-self.privacy.clip_norm_lr * (share - self.privacy.target_quantile))
        return shaped_like(noised, global_params)
