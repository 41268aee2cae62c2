"""Flower's own differential privacy around FLTest's selection: its strategy wrappers and client mods, seeded.

``training.privacy`` picks one of Flower 1.42's four wrappers (``flwr.serverapp.strategy``:
DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping) around Flower's FedAvg or FedProx, and, when the
clients clip, the matching mod of Flower's (``fixedclipping_mod``, ``adaptiveclipping_mod``) on FLTest's ClientApp.
FLTest adds three things, none of them in the mechanism:

- each client reports the weight 1 (:data:`fltest.backends.flwr.client_app.EQUAL_WEIGHT_KEY`), which Flower's
  FedAvg weighs by: DP-FedAvg averages
  with equal weights, and Flower's accountant requires them;
- Flower draws its noise from numpy's global generator, with no seed: each aggregation runs with that generator
  seeded from the experiment's seed and the round (:func:`fltest.privacy.noise.global_generator_seeded`);
- each round's release is recorded (:class:`fltest.rounds.RoundPrivacy`): the noise measured on the model, Flower's
  formula with the values it used, and ε from Flower's own accountant (fixed clipping with noise; Flower's
  wrapper refuses to account for a strategy whose ``aggregate_train`` is not FedAvg's own, as FLTest's selection's
  is not, so FLTest composes the event the wrapper would compose). Flower's adaptive wrappers have no accountant.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
)
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

from fltest.backends.flwr.client_app import record_to_params
from fltest.backends.flwr.strategy import SelectedPartitions
from fltest.config.privacy import AdaptiveClipping, NoisedAveraging
from fltest.privacy.noise import global_generator_seeded, measured_stdv, noise_stdv
from fltest.rounds import RoundPrivacy


class SeededPrivacy:
    """Put before one of Flower's DP wrappers: seeds its noise per round and records what each round released."""

    def __init__(self, *args: Any, seed: int, delta: float, accounted_population: int | None, **kwargs: Any) -> None:
        """The wrapper's own arguments, then the experiment's ``seed`` and the ``delta`` ε is reported at; with an
        ``accounted_population`` (the clients the rounds sample from), Flower's accountant spends each noised round.
        """
        super().__init__(*args, **kwargs)
        self.seed, self.delta = seed, delta
        self.released: dict[int, RoundPrivacy] = {}
        self.flower_accountant = None
        if accounted_population is not None and self.noise_multiplier > 0:  # type: ignore[attr-defined]
            self.flower_accountant = RdpAccountant(
                PrivacyConfig(
                    target_delta=delta,
                    population_size=accounted_population,
                    neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                    sampling_method=SamplingMethod.NO_AMPLIFICATION,
                )
            )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's aggregation with the global generator seeded for the round; the round's release recorded."""
        replies = list(replies)
        clipping_norm = self.clipping_norm  # type: ignore[attr-defined]  # adaptive: the norm of this round
        with global_generator_seeded(self.seed, server_round):
            arrays, metrics = super().aggregate_train(server_round, replies)  # type: ignore[misc]
        selection: SelectedPartitions = self.strategy  # type: ignore[attr-defined]
        if arrays is not None and selection.last_aggregate is not None:  # Flower noised a copy of it
            epsilon = None
            if self.flower_accountant is not None:
                event = GaussianPrivacyEvent(
                    noise_multiplier=self.noise_multiplier,  # type: ignore[attr-defined]
                    sample_size=len(replies),
                    population_size=self.flower_accountant.config.population_size,
                )
                self.flower_accountant.compose(event)
                epsilon = self.flower_accountant.get_privacy_spent(self.delta).epsilon
            self.released[server_round] = RoundPrivacy(
                clipping_norm=clipping_norm,
                noise_std=measured_stdv(record_to_params(arrays), record_to_params(selection.last_aggregate)),
                noise_std_expected=noise_stdv(
                    self.noise_multiplier,  # type: ignore[attr-defined]  # adaptive: z_Δ
                    self.clipping_norm,  # type: ignore[attr-defined]  # adaptive: as Flower noises, after its update
                    self.num_sampled_clients,  # type: ignore[attr-defined]
                ),
                epsilon=epsilon,
                delta=self.delta,
            )
        return arrays, metrics


class SeededServerSideFixedClipping(SeededPrivacy, DifferentialPrivacyServerSideFixedClipping):
    """Flower's server-side fixed clipping, seeded."""


class SeededClientSideFixedClipping(SeededPrivacy, DifferentialPrivacyClientSideFixedClipping):
    """Flower's client-side fixed clipping (the clients' ``fixedclipping_mod`` clips), seeded."""


class SeededServerSideAdaptiveClipping(SeededPrivacy, DifferentialPrivacyServerSideAdaptiveClipping):
    """Flower's server-side adaptive clipping, seeded."""


class SeededClientSideAdaptiveClipping(SeededPrivacy, DifferentialPrivacyClientSideAdaptiveClipping):
    """Flower's client-side adaptive clipping (the clients' ``adaptiveclipping_mod`` clips and reports), seeded."""


def private_strategy(
    privacy: NoisedAveraging, selection: SelectedPartitions, sampled: int, population: int, seed: int
) -> SeededPrivacy:
    """Flower's wrapper for ``privacy`` around ``selection`` (``sampled`` clients a round of ``population``).

    Flower's adaptive wrappers take a target *clipped* quantile: they are given ``1 - γ``, the share of clipped
    changes the config's γ (the unclipped share, as in the paper) aims at. They move the clipping norm by
    ``exp(-η_C (clipped share - target))``, the reciprocal of the paper's ``exp(-η_C (unclipped share - γ))``
    (without the count's noise): where too many changes are clipped, Flower's norm shrinks and the paper's grows.
    """
    common = {"seed": seed, "delta": privacy.delta}
    if isinstance(privacy, AdaptiveClipping):  # Flower's adaptive wrappers have no accountant
        adaptive = SeededServerSideAdaptiveClipping if privacy.side == "server" else SeededClientSideAdaptiveClipping
        return adaptive(
            selection,
            privacy.noise_multiplier,
            sampled,
            initial_clipping_norm=privacy.initial_clipping_norm,
            target_clipped_quantile=1 - privacy.target_quantile,
            clip_norm_lr=privacy.clip_norm_lr,
            clipped_count_stddev=privacy.clipped_count_stddev,
            accounted_population=None,
            **common,
        )
    fixed = SeededServerSideFixedClipping if privacy.side == "server" else SeededClientSideFixedClipping
    return fixed(
        selection, privacy.noise_multiplier, privacy.clipping_norm, sampled, accounted_population=population, **common
    )
