"""Pydantic schema of an FLTest experiment config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from fltest.config.partitions import IidPartition, PartitionConfig
from fltest.config.runs import RUN_NAME_PATTERN, RunConfig
from fltest.config.strategies import FedAvgStrategy, StrategyConfig, named_strategy


class _Strict(BaseModel):
    """Base model: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class DatasetConfig(_Strict):
    """Where the data comes from and which columns hold features and label.

    ``source`` is ``digits`` (scikit-learn's bundled digits), ``hub`` (a Hugging
    Face hub id in ``name``) or ``disk`` (a folder written by ``save_to_disk`` in
    ``path``).
    """

    source: Literal["digits", "hub", "disk"]
    name: str | None = None
    revision: str | None = None
    split: str = "train"
    path: Path | None = None
    features: list[str] = Field(default_factory=lambda: ["image"], min_length=1)
    label: str = "label"
    scale: Annotated[float, Field(gt=0)] = 1.0
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    max_samples: PositiveInt | None = None

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

    type: Literal["logreg", "mlp"] = "logreg"
    hidden: list[PositiveInt] = Field(default_factory=list)
    module: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")] | None = None

    @model_validator(mode="after")
    def _hidden_fields(self) -> ModelConfig:
        if self.module is not None and (self.type != "logreg" or self.hidden):  # logreg: the default, dumped with every config
            raise ValueError("module: a model module replaces type and hidden; give one or the other")
        if self.type == "mlp" and not self.hidden:
            raise ValueError("hidden: an mlp needs at least one hidden layer size")
        if self.type == "logreg" and self.hidden:
            raise ValueError("hidden: only for type 'mlp'")
        return self


class TrainingConfig(_Strict):
    """Rounds, local work per round, client sampling, and the server strategy (FedAvg by default)."""

    rounds: PositiveInt
    local_epochs: PositiveInt | None = None
    local_steps: PositiveInt | None = None
    batch_size: PositiveInt = 32
    learning_rate: Annotated[float, Field(gt=0)] = 0.1
    fraction_fit: Annotated[float, Field(gt=0, le=1)] = 1.0
    round_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    strategy: StrategyConfig = Field(default_factory=FedAvgStrategy)

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

    dir: Path = Path("results")
    save_round_models: bool = False


class CompareConfig(_Strict):
    """How runs are compared with the reference run.

    ``tolerance``: the |Δw| (largest absolute difference of the global models after a round) up to
    which a run agrees with the reference. The CPU runs give the reference's model bit for bit, so the
    default is tight; GPU training is not bit-exact with the CPU reference: give it a wider one.
    """

    tolerance: Annotated[float, Field(ge=0)] = 1e-9


class ExperimentConfig(_Strict):
    """A whole experiment: data, model, training, and the runs to compare."""

    name: Annotated[str, Field(pattern=RUN_NAME_PATTERN)]  # the experiment's name: a folder, like a run's
    seed: int = 0
    dataset: DatasetConfig
    partition: PartitionConfig = IidPartition()
    clients: Annotated[int, Field(ge=1)]
    model: ModelConfig = ModelConfig()
    training: TrainingConfig
    total_cpus: PositiveInt = 1
    total_gpus: Annotated[float, Field(ge=0)] = 0
    hooks: str | None = None
    output: OutputConfig = OutputConfig()
    compare: CompareConfig = CompareConfig()
    runs: list[RunConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_runs(self) -> ExperimentConfig:
        names = [run.name for run in self.runs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"runs: duplicate run name {duplicates[0]!r}")
        return self
