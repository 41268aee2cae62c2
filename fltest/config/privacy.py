"""Differential privacy of the global model (``training.privacy``): DP-FedAvg, orthogonal to how clients train.

Each round every client's change ``Δ_k = w_k - w_t`` is clipped to an L2 norm of at most ``C``, the clipped
changes are averaged with equal weights, and Gaussian noise of standard deviation ``z·C/m`` is added to the
average (``z`` the noise multiplier, ``m`` the clients of the round):

- ``fixed_clipping``: ``C`` is the config's ``clipping_norm`` (McMahan, Ramage, Talwar and Zhang, 2018,
  "Learning Differentially Private Recurrent Language Models", DP-FedAvg with uniform weights);
- ``adaptive_clipping``: ``C`` follows a quantile of the clients' update norms (Andrew, Thakkar, McMahan and
  Ramaswamy, 2021, "Differentially Private Learning with Adaptive Clipping", Algorithm 1).

``side`` says who clips: the server (``server``: it sees the clients' unclipped models) or each client before
it sends (``client``); the model is the same. The noise is drawn from the experiment's seed and the round, so a
run repeats. :mod:`fltest.privacy` computes all of it; Flower runs its own wrappers and mods.

Local differential privacy noises each client's model instead of the average:

- ``local_gaussian``: each client clips its change to ``C`` and adds ``N(0, σ²)`` to every coordinate of the model
  it sends, ``σ = 2C·√(2 ln(1.25/δ))/ε`` (the Gaussian mechanism, Dwork and Roth 2014, Theorem A.1, with the
  sensitivity of a release any of whose inputs may differ: the diameter ``2C`` of the ball the clipped changes lie
  in), so that each round's release is (ε, δ)-differentially private whatever the server; the server averages as
  the strategy does. Flower runs its own ``LocalDpMod``.

Two more mechanisms share only part of each change instead of noising the average:

- ``percentile_sharing``: each client shares the coordinates of its change whose magnitude is at least the
  ``percentile``-th percentile of its change's magnitudes, each bounded to ``[-gamma, gamma]``, and zero elsewhere
  (Shokri and Shmatikov, 2015, "Privacy-Preserving Deep Learning", selective parameter sharing); the server adds
  the shared changes' average, weighted by examples. NVFlare runs its own filter (``PercentilePrivacy``);
- ``exclude_parameters``: each client withholds the parameters named by position, whose global values then
  never change (NVFlare's filter ``ExcludeVars``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SIDE = "Who clips: `server` (it sees the clients' unclipped models) or `client` (each clips before it sends)."
NOISE = "z: the noise's standard deviation on the clients' summed clipped changes, in units of the clipping norm."
DELTA = "δ: the privacy spent is reported as ε at this δ."


class _Privacy(BaseModel):
    """What both mechanisms have. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    side: Literal["server", "client"] = Field("server", description=SIDE)
    noise_multiplier: Annotated[float, Field(ge=0)] = Field(description=NOISE + " Required; 0: clipping only.")
    delta: Annotated[float, Field(gt=0, lt=1)] = Field(1e-5, description=DELTA)


class FixedClipping(_Privacy):
    """DP-FedAvg with a fixed clipping norm ``C``."""

    mechanism: Literal["fixed_clipping"] = Field(description="The mechanism, by name.")
    clipping_norm: Annotated[float, Field(gt=0)] = Field(description="C: the largest L2 norm of a client's change.")


class AdaptiveClipping(_Privacy):
    """DP-FedAvg whose clipping norm tracks the ``target_quantile`` of the clients' update norms:
    ``C ← C·exp(-clip_norm_lr·(b̃ - target_quantile))``, ``b̃`` the noised share of unclipped updates."""

    mechanism: Literal["adaptive_clipping"] = Field(description="The mechanism, by name.")
    initial_clipping_norm: Annotated[float, Field(gt=0)] = Field(0.1, description="C in round 1.")
    target_quantile: Annotated[float, Field(ge=0, le=1)] = Field(
        0.5, description="γ: the share of the clients' changes left unclipped that C aims at."
    )
    clip_norm_lr: Annotated[float, Field(gt=0)] = Field(0.2, description="η_C: the step of C's geometric update.")
    clipped_count_stddev: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="σ_b: the noise on the count of unclipped changes (none: clients a round / 20; 0 without noise).",
    )

    @model_validator(mode="after")
    def _count_noise_leaves_room(self) -> AdaptiveClipping:
        if self.noise_multiplier > 0 and self.clipped_count_stddev is not None:
            if self.noise_multiplier >= 2 * self.clipped_count_stddev:
                raise ValueError(
                    f"clipped_count_stddev: {self.clipped_count_stddev:g} must be above noise_multiplier / 2 "
                    f"({self.noise_multiplier / 2:g}): the count's noise takes its share of z"
                )
        return self


class PercentileSharing(BaseModel):
    """Each client shares the largest coordinates of its change, bounded: selective parameter sharing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mechanism: Literal["percentile_sharing"] = Field(description="The mechanism, by name.")
    percentile: Annotated[float, Field(ge=0, le=100)] = Field(
        10.0,
        description="Coordinates of a change whose magnitude is below this percentile of its magnitudes are not shared.",
    )
    gamma: Annotated[float, Field(gt=0)] = Field(0.01, description="γ: each shared coordinate is bounded to [-γ, γ].")


class ExcludedParameters(BaseModel):
    """Each client withholds some of the model's parameters: their global values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mechanism: Literal["exclude_parameters"] = Field(description="The mechanism, by name.")
    parameters: list[Annotated[int, Field(strict=True, ge=0)]] = Field(
        min_length=1,
        description="The positions of the parameters withheld in the model's list of parameters (0: the first).",
    )

    @model_validator(mode="after")
    def _each_once(self) -> ExcludedParameters:
        twice = sorted(p for p in set(self.parameters) if self.parameters.count(p) > 1)
        if twice:
            raise ValueError(f"parameters: {twice[0]} twice")
        return self


class LocalGaussian(BaseModel):
    """Local differential privacy: each client clips its change and noises the model it sends, so that the server
    learns little of any client's data whoever it trusts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mechanism: Literal["local_gaussian"] = Field(description="The mechanism, by name.")
    clipping_norm: Annotated[float, Field(gt=0)] = Field(description="C: the largest L2 norm of a client's change.")
    epsilon: Annotated[float, Field(gt=0, lt=1)] = Field(
        description="ε of each client's release in a round, below 1 (where the Gaussian mechanism's calibration holds)."
    )
    delta: Annotated[float, Field(gt=0, lt=1)] = Field(1e-5, description="δ of each release; ε is reported at it.")


#: The mechanisms of DP-FedAvg: clip each change, noise the average.
NoisedAveraging = FixedClipping | AdaptiveClipping

#: The mechanisms where each client shares part of its change (the server adds their weighted average).
SharedChanges = PercentileSharing | ExcludedParameters

PrivacyConfig = Annotated[
    FixedClipping | AdaptiveClipping | LocalGaussian | PercentileSharing | ExcludedParameters,
    Field(discriminator="mechanism"),
]
