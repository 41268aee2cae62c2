"""The server strategy of an experiment (``training.strategy``), typed: one model a strategy, with its parameters.

A config names a strategy with defaults (``strategy: fedadam``) or sets its parameters
(``strategy: {name: fedadam, server_learning_rate: 0.01, tau: 0.001}``). Which model validates it
follows from ``name``; a parameter of another strategy, or a value out of range, is refused by
the schema with the field's path. The reference's rules live in :mod:`fltest.server_update`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

STRATEGIES = (
    "fedavg",
    "fedprox",
    "fedavgm",
    "fedadagrad",
    "fedadam",
    "fedyogi",
    "scaffold",
    "fedmedian",
    "fedtrimmedavg",
    "krum",
    "multikrum",
    "bulyan",
    "qfedavg",
)
#: The robust aggregators: the global model is a statistic of the clients' models that few outliers can move.
ROBUST = ("fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan")

PositiveFloat = Annotated[float, Field(gt=0)]
Decay = Annotated[float, Field(ge=0, lt=1)]
StrictNonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
StrictPositiveInt = Annotated[int, Field(strict=True, ge=1)]

NAME = "The strategy, by name."
BETA_2 = "β2: the decay of the second moment `v`."


class _Strategy(BaseModel):
    """A strategy's parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def proximal_mu(self) -> float:
        """The weight of FedProx's proximal term in local training; 0 for every other strategy."""
        return 0.0


class FedAvgStrategy(_Strategy):
    """FedAvg (McMahan et al., 2017): the new global model is the clients' average, weighted by examples."""

    name: Literal["fedavg"] = Field("fedavg", description=NAME)


class FedProxStrategy(_Strategy):
    """FedProx (Li et al., 2020): FedAvg whose clients minimise ``F_k(w) + mu/2 ||w - w_t||^2``."""

    name: Literal["fedprox"] = Field(description=NAME)
    mu: PositiveFloat = Field(description="The weight of the proximal term `mu/2 ||w - w_t||^2` (required).")

    @property
    def proximal_mu(self) -> float:
        """``mu``: local training adds ``mu * (w - w_t)`` to each gradient."""
        return self.mu


class FedAvgMStrategy(_Strategy):
    """FedAvg with server momentum (Hsu et al., 2019): ``v = momentum * v + Δ``, ``w = w - server_learning_rate * v``."""

    name: Literal["fedavgm"] = Field(description=NAME)
    server_learning_rate: PositiveFloat = Field(1.0, description="η: the server's step along the momentum.")
    server_momentum: Decay = Field(0.9, description="β: the server momentum.")


class _AdaptiveStrategy(_Strategy):
    """The parameters FedAdagrad, FedAdam and FedYogi share (Reddi et al., 2021, Algorithm 2): η, β1, τ."""

    server_learning_rate: PositiveFloat = Field(0.1, description="η: the server's learning rate.")
    beta_1: Decay = Field(0.9, description="β1: the decay of the first moment `m`.")
    tau: PositiveFloat = Field(1e-3, description="τ: the adaptivity; the smaller, the more adaptive.")


class FedAdagradStrategy(_AdaptiveStrategy):
    """FedAdagrad: ``v_t = v_{t-1} + Δ_t²``."""

    name: Literal["fedadagrad"] = Field(description=NAME)


class FedAdamStrategy(_AdaptiveStrategy):
    """FedAdam: ``v_t = β2 v_{t-1} + (1 - β2) Δ_t²``."""

    name: Literal["fedadam"] = Field(description=NAME)
    beta_2: Decay = Field(0.99, description=BETA_2)


class FedYogiStrategy(_AdaptiveStrategy):
    """FedYogi: ``v_t = v_{t-1} - (1 - β2) Δ_t² sign(v_{t-1} - Δ_t²)``."""

    name: Literal["fedyogi"] = Field(description=NAME)
    beta_2: Decay = Field(0.99, description=BETA_2)


class ScaffoldStrategy(_Strategy):
    """SCAFFOLD (Karimireddy et al., 2020, Algorithm 1, option II): each client adds ``c - c_i`` to every gradient,
    the server steps ``x += server_learning_rate * mean(y_i - x)`` and ``c += (|S|/N) mean(Δc_i)``."""

    name: Literal["scaffold"] = Field(description=NAME)
    server_learning_rate: PositiveFloat = Field(1.0, description="η_g: the global step size.")


class FedMedianStrategy(_Strategy):
    """FedMedian (Yin et al., 2018, "Byzantine-Robust Distributed Learning", the coordinate-wise median): each
    parameter of the global model is the median of the clients' values of it."""

    name: Literal["fedmedian"] = Field(description=NAME)


class FedTrimmedAvgStrategy(_Strategy):
    """FedTrimmedAvg (Yin et al., 2018, the coordinate-wise trimmed mean): for each parameter, the ``⌊beta·n⌋`` largest
    and smallest of the n clients' values are dropped and the rest averaged."""

    name: Literal["fedtrimmedavg"] = Field(description=NAME)
    beta: float = Field(0.2, ge=0, lt=0.5, description="β: the fraction of the clients' values cut at each end.")


class KrumStrategy(_Strategy):
    """Krum (Blanchard et al., 2017, "Machine Learning with Adversaries"): the global model is the client model whose
    summed squared distance to its ``n - f - 2`` nearest others is the smallest."""

    name: Literal["krum"] = Field(description=NAME)
    num_malicious: StrictNonNegativeInt = Field(
        0, description="f: the malicious clients Krum tolerates (the clients a round needs more than 2f + 2)."
    )


class MultiKrumStrategy(KrumStrategy):
    """Multi-Krum (Blanchard et al., 2017): the mean of the ``num_selected`` client models of the smallest Krum scores."""

    name: Literal["multikrum"] = Field(description=NAME)  # type: ignore[assignment]
    num_selected: StrictPositiveInt = Field(description="m: the client models averaged (required).")


class BulyanStrategy(_Strategy):
    """Bulyan (El Mhamdi et al., 2018): ``n - 2f`` models chosen by Krum one at a time, then, for each parameter, the
    mean of the ``n - 4f`` chosen values closest to their median."""

    name: Literal["bulyan"] = Field(description=NAME)
    num_malicious: StrictNonNegativeInt = Field(
        0, description="f: the malicious clients Bulyan tolerates (the clients a round need be at least 4f + 3)."
    )


class QFedAvgStrategy(_Strategy):
    """q-FedAvg (Li, Sanjabi, Beirami and Smith, 2020, "Fair Resource Allocation in Federated Learning", Algorithm 2):
    clients of a higher loss weigh more, by ``F_k(w_t)^q``; the clients' step size is ``1/L = learning_rate``."""

    name: Literal["qfedavg"] = Field(description=NAME)
    q: float = Field(0.1, ge=0, description="q: the fairness; 0 weighs every client alike, larger favours the worst.")


StrategyConfig = Annotated[
    FedAvgStrategy
    | FedProxStrategy
    | FedAvgMStrategy
    | FedAdagradStrategy
    | FedAdamStrategy
    | FedYogiStrategy
    | ScaffoldStrategy
    | FedMedianStrategy
    | FedTrimmedAvgStrategy
    | KrumStrategy
    | MultiKrumStrategy
    | BulyanStrategy
    | QFedAvgStrategy,
    Field(discriminator="name"),
]


#: Values for the parameters a strategy has no default for, as the benchmarks and tests name every strategy.
EXAMPLE_PARAMETERS: dict[str, dict[str, Any]] = {"fedprox": {"mu": 0.1}, "multikrum": {"num_selected": 2}}


def example_strategy(name: str) -> dict[str, Any]:
    """``{"name": name}`` with :data:`EXAMPLE_PARAMETERS`' values for what it requires."""
    return {"name": name, **EXAMPLE_PARAMETERS.get(name, {})}


def named_strategy(value: Any) -> Any:
    """``fedadam`` -> ``{"name": "fedadam"}``: a strategy named alone takes its defaults."""
    return {"name": value} if isinstance(value, str) else value
