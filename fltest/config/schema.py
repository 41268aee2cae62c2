"""Pydantic schema of an FLTest experiment config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from fltest.config.attacks import AttackConfig
from fltest.config.partitions import IidPartition, PartitionConfig
from fltest.config.privacy import AdaptiveClipping, PrivacyConfig
from fltest.config.runs import RUN_NAME_PATTERN, RunConfig
from fltest.config.strategies import (
    BulyanStrategy,
    FedAvgStrategy,
    FedProxStrategy,
    KrumStrategy,
    MultiKrumStrategy,
    StrategyConfig,
    named_strategy,
)


class _Strict(BaseModel):
    """Base model: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class DatasetConfig(_Strict):
    """Where the data comes from and which columns hold features and label.

    ``source`` is ``digits`` (scikit-learn's bundled digits), ``hub`` (a Hugging
    Face hub id in ``name``) or ``disk`` (a folder written by ``save_to_disk`` in
    ``path``).
    """

    source: Literal["digits", "hub", "disk"] = Field(
        description="`digits` (scikit-learn's bundled 8x8 digits, offline), `hub` (a Hugging Face dataset, `name`) "
        "or `disk` (a `save_to_disk` folder, `path`)."
    )
    name: str | None = Field(None, description="The Hugging Face dataset id; `source: hub` only, and required there.")
    revision: str | None = Field(
        None, description="The hub dataset's revision (a branch, tag or commit); `source: hub` only."
    )
    split: str = Field(
        "train", description="The split read from the source; its test part is held out (`test_fraction`)."
    )
    path: Path | None = Field(
        None,
        description="A `save_to_disk` folder, relative to the config file; `source: disk` only, and required there.",
    )
    features: list[str] = Field(
        default_factory=lambda: ["image"],
        min_length=1,
        description="The feature columns; each sample keeps its shape, several columns are flattened and joined.",
    )
    label: str = Field("label", description="The label column (integer classes).")
    scale: Annotated[float, Field(gt=0)] = Field(
        1.0, description="Features are divided by it (16 for digits' pixels, 0..16)."
    )
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.2, description="The share of the rows held out for the server's evaluation of the global model."
    )
    max_samples: PositiveInt | None = Field(None, description="At most this many rows of the source (none: all).")

    @model_validator(mode="after")
    def _source_fields(self) -> DatasetConfig:
        if self.source == "hub" and not self.name:
            raise ValueError("name: required when source is 'hub' (a Hugging Face dataset id)")
        if self.source == "disk" and self.path is None:
            raise ValueError("path: required when source is 'disk' (a save_to_disk folder)")
        if self.source != "hub" and (self.name or self.revision):
            raise ValueError("name/revision: only for source 'hub'")
        if self.source != "disk" and self.path is not None:
            raise ValueError("path: only for source 'disk'")
        return self


class ModelConfig(_Strict):
    """The model: the built-in numpy softmax regression (``logreg``) or MLP with ReLU layers, or a user's module.

    ``module`` names a Python module beside the config (or on ``sys.path``) that implements
    :mod:`fltest.model.contract`; it replaces ``type`` and ``hidden``.
    """

    type: Literal["logreg", "mlp"] = Field(
        "logreg",
        description="The built-in numpy model (float64): `logreg` (softmax regression) or `mlp` (ReLU layers).",
    )
    hidden: list[PositiveInt] = Field(
        default_factory=list, description="The hidden layer sizes of an `mlp`; `mlp` only."
    )
    module: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")] | None = Field(
        None,
        description="Your own model: a module beside the config (or on `sys.path`) implementing the model "
        "contract (`init_params`, `train`, `evaluate`); replaces `type` and `hidden`.",
    )

    @model_validator(mode="after")
    def _hidden_fields(self) -> ModelConfig:
        if self.module is not None and (
            self.type != "logreg" or self.hidden
        ):  # logreg: the default, dumped with every config
            raise ValueError("module: a model module replaces type and hidden; give one or the other")
        if self.type == "mlp" and not self.hidden:
            raise ValueError("hidden: an mlp needs at least one hidden layer size")
        if self.type == "logreg" and self.hidden:
            raise ValueError("hidden: only for type 'mlp'")
        return self


class TrainingConfig(_Strict):
    """Rounds, local work per round, client sampling, and the server strategy (FedAvg by default)."""

    rounds: PositiveInt = Field(description="The number of federated rounds.")
    local_epochs: PositiveInt | None = Field(
        None, description="Passes over its shard a client makes each round; give exactly one of this and `local_steps`."
    )
    local_steps: PositiveInt | None = Field(
        None, description="Minibatch steps a client makes each round; give exactly one of this and `local_epochs`."
    )
    batch_size: PositiveInt = Field(32, description="The minibatch size of local training.")
    learning_rate: Annotated[float, Field(gt=0)] = Field(0.1, description="The clients' learning rate (plain SGD).")
    fraction_fit: Annotated[float, Field(gt=0, le=1)] = Field(
        1.0, description="The share of clients that train each round (at least one), drawn from the seed."
    )
    round_timeout_s: Annotated[float, Field(gt=0)] = Field(
        600.0, description="Seconds a client may train in a round; every backend's deadlines derive from it."
    )
    strategy: StrategyConfig = Field(
        default_factory=FedAvgStrategy,
        description="The server strategy: a name with its defaults (`fedadam`) or a mapping with `name` and its "
        "parameters.",
    )
    privacy: PrivacyConfig | None = Field(
        None,
        description="Privacy of the clients' changes: `{mechanism: fixed_clipping | adaptive_clipping, side: server "
        "| client, noise_multiplier, ...}` (DP-FedAvg), `{mechanism: local_gaussian, clipping_norm, epsilon}` (local "
        "DP), `{mechanism: percentile_sharing, percentile, gamma}` or `{mechanism: exclude_parameters, parameters}`; "
        "FedAvg and FedProx only.",
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy_by_name(cls, value: object) -> object:
        return named_strategy(value)

    @model_validator(mode="after")
    def _one_budget(self) -> TrainingConfig:
        if (self.local_epochs is None) == (self.local_steps is None):
            raise ValueError("local_epochs/local_steps: give exactly one of them")
        return self


class OutputConfig(_Strict):
    """Where results go and what is kept."""

    dir: Path = Field(Path("results"), description="The results root, relative to the folder `fltest` runs in.")
    save_round_models: bool = Field(False, description="Keep every round's global model (`models/round-NNNN.npz`).")


class CompareConfig(_Strict):
    """How runs are compared with the reference run.

    ``tolerance``: the |Δw| (largest absolute difference of the global models after a round) up to
    which a run agrees with the reference. The CPU runs give the reference's model bit for bit, so the
    default is tight; GPU training is not bit-exact with the CPU reference: give it a wider one.
    """

    tolerance: Annotated[float, Field(ge=0)] = Field(
        1e-9,
        description="The largest |Δw| from the reference's global model after a round at which a run still "
        "agrees with it; widen it for GPU training.",
    )


class ExperimentConfig(_Strict):
    """A whole experiment: data, model, training, and the runs to compare."""

    name: Annotated[str, Field(pattern=RUN_NAME_PATTERN)] = Field(
        description="The experiment's name: its results folder, `<output.dir>/<name>/`."
    )
    seed: int = Field(0, description="The one seed everything derives from: test split, partition, selection, models.")
    dataset: DatasetConfig = Field(description="Where the data comes from and which columns hold features and label.")
    partition: PartitionConfig = Field(
        IidPartition(),
        description="How the training rows are split over clients: a Flower Datasets partitioner, "
        "by `method` and its parameters.",
    )
    clients: Annotated[int, Field(ge=1)] = Field(description="The number of clients (partitions).")
    model: ModelConfig = Field(ModelConfig(), description="The model every client trains.")
    training: TrainingConfig = Field(
        description="Rounds, local work, client sampling, deadlines and the server strategy."
    )
    total_cpus: PositiveInt = Field(
        1, description="CPUs a backend may use on one machine (ignored on a Ray cluster, `FLTEST_RAY_ADDRESS`)."
    )
    total_gpus: Annotated[float, Field(ge=0)] = Field(
        0,
        description="GPUs a backend may use; each Flower simulation client asks for `total_gpus / total_cpus` of one.",
    )
    hooks: str | None = Field(
        None,
        description="A module of client hooks (`before_local_training`, `after_local_training`, "
        "`evaluate_metrics`), importable from the config's folder.",
    )
    attack: AttackConfig | None = Field(
        None,
        description="Malicious clients: `{kind: sign_flip | scaled | gaussian, clients: [...], ...}`, applied to the "
        "model each sends, the same on every backend.",
    )
    output: OutputConfig = Field(OutputConfig(), description="Where results go and what is kept.")
    compare: CompareConfig = Field(CompareConfig(), description="How runs are compared with the reference run.")
    runs: list[RunConfig] = Field(
        min_length=1,
        description="The runs to compare: `{name, framework, options}`, `framework` one of `reference`, "
        "`flwr`, `nvflare`; names unique.",
    )

    @model_validator(mode="after")
    def _enough_clients_for_krum(self) -> ExperimentConfig:
        strategy = self.training.strategy
        if not isinstance(strategy, KrumStrategy | BulyanStrategy):
            return self
        sampled = clients_per_round(self.clients, self.training.fraction_fit)
        bulyan = isinstance(strategy, BulyanStrategy)
        needed = (4 if bulyan else 2) * strategy.num_malicious + 3
        if sampled < needed:
            raise ValueError(
                f"training.strategy.num_malicious: {strategy.num_malicious} needs at least {needed} clients a round "
                f"({'4f + 3' if bulyan else 'more than 2f + 2'}), and {sampled} train (clients {self.clients}, "
                f"fraction_fit {self.training.fraction_fit:g})"
            )
        if isinstance(strategy, MultiKrumStrategy) and strategy.num_selected > sampled:
            raise ValueError(
                f"training.strategy.num_selected: {strategy.num_selected} is more than the {sampled} clients a round"
            )
        return self

    @model_validator(mode="after")
    def _privacy_on_an_average(self) -> ExperimentConfig:
        privacy, strategy = self.training.privacy, self.training.strategy
        if privacy is None:
            return self
        if not isinstance(strategy, FedAvgStrategy | FedProxStrategy):
            raise ValueError(
                f"training.privacy: it works on FedAvg's average of the clients' changes; strategy {strategy.name} "
                "is not fedavg or fedprox"
            )
        sampled = clients_per_round(self.clients, self.training.fraction_fit)
        if isinstance(privacy, AdaptiveClipping) and privacy.clipped_count_stddev is None:
            if privacy.noise_multiplier >= 2 * sampled / 20:
                raise ValueError(
                    f"training.privacy.noise_multiplier: {privacy.noise_multiplier:g} needs clipped_count_stddev "
                    f"above {privacy.noise_multiplier / 2:g}; its default, clients a round / 20, is {sampled / 20:g}"
                )
        return self

    @model_validator(mode="after")
    def _attackers_are_clients(self) -> ExperimentConfig:
        if self.attack is None:
            return self
        clients = self.attack.clients
        strangers = [c for c in clients if c >= self.clients]
        if strangers:
            raise ValueError(f"attack.clients: {strangers[0]} is not a client (0..{self.clients - 1})")
        if len(set(clients)) != len(clients):
            raise ValueError(f"attack.clients: {sorted(c for c in set(clients) if clients.count(c) > 1)[0]} twice")
        return self

    @model_validator(mode="after")
    def _unique_runs(self) -> ExperimentConfig:
        names = [run.name for run in self.runs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"runs: duplicate run name {duplicates[0]!r}")
        return self


def clients_per_round(clients: int, fraction_fit: float) -> int:
    """How many clients train each round: ``max(1, round(fraction_fit * clients))``."""
    return max(1, round(fraction_fit * clients))
