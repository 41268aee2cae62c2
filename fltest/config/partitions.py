"""How the training rows are split over clients: Flower Datasets' partitioners, by their names and parameters.

One pydantic model a partitioner, discriminated by ``method``; each names the flwr-datasets
class it builds and gives the parameters it passes (:meth:`_Partition.flwr_params`), so that
adding a partitioner touches one class here. Parameters keep
flwr-datasets' names and defaults; ``shards`` with ``shards_per_client`` (FLTest's earlier
spelling) stays accepted. ``min_samples_per_client`` is FLTest's floor for every method; the
Dirichlet partitioners redraw until it holds (flwr-datasets' ``min_partition_size``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveInt,
    StrictBool,
    Tag,
)


def _positive(alpha: float | list[float]) -> float | list[float]:
    """Dirichlet concentration: one value for every class, or one a class; each above 0."""
    if any(value <= 0 for value in (alpha if isinstance(alpha, list) else [alpha])):
        raise ValueError("must be > 0 (one value, or one per class)")
    return alpha


Alpha = Annotated[float | list[float], AfterValidator(_positive)]

METHOD = "The partitioner (flwr-datasets 0.6.1's, by name)."
ALPHA = "The Dirichlet concentration: one value for every class, or one a class; each above 0 (small: more skewed)."
SHUFFLE = "Shuffle the rows within each client's partition."


class _Partition(BaseModel):
    """Options every partitioner has: FLTest's floor on each client's size."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    min_samples_per_client: PositiveInt = Field(
        1,
        validation_alias=AliasChoices("min_samples_per_client", "min_partition_size"),
        description="The fewest training rows a client may get, for every method; the Dirichlet partitioners redraw "
        "until it holds (flwr-datasets' `min_partition_size`, also accepted as a key).",
    )

    flwr_class: ClassVar[str]  # the flwr_datasets.partitioner class built
    partitions_by_label: ClassVar[bool] = False  # the label column is its partition_by
    sized_by_client_count: ClassVar[bool] = (
        True  # it takes num_partitions (the others: a size each, or a column's values)
    )
    seeded: ClassVar[bool] = False  # it draws at random: the experiment's seed is its seed

    def by_column(self) -> str | None:
        """The column (besides the label) the partitioner reads, if any."""
        return getattr(self, "partition_by", None)

    def flwr_params(self, num_clients: int, label: str, seed: int) -> dict[str, Any]:
        """The keyword arguments of :attr:`flwr_class` for ``num_clients`` clients, label column ``label``, ``seed``."""
        params = self.model_dump(exclude={"method", "min_samples_per_client"})
        if self.partitions_by_label:
            params["partition_by"] = label
        if self.sized_by_client_count:
            params["num_partitions"] = num_clients
        if self.seeded:
            params["seed"] = seed
        return params


class IidPartition(_Partition):
    """``IidPartitioner``: near-equal parts of the shuffled training rows."""

    flwr_class = "IidPartitioner"
    method: Literal["iid"] = Field("iid", description=METHOD)


class LinearPartition(_Partition):
    """``LinearPartitioner``: client ``i``'s size proportional to ``i + 1``."""

    flwr_class = "LinearPartitioner"
    method: Literal["linear"] = Field(description=METHOD)


class SquarePartition(_Partition):
    """``SquarePartitioner``: client ``i``'s size proportional to ``(i + 1) ** 2``."""

    flwr_class = "SquarePartitioner"
    method: Literal["square"] = Field(description=METHOD)


class ExponentialPartition(_Partition):
    """``ExponentialPartitioner``: client ``i``'s size proportional to ``e ** i``."""

    flwr_class = "ExponentialPartitioner"
    method: Literal["exponential"] = Field(description=METHOD)


class SizePartition(_Partition):
    """``SizePartitioner``: the given row count for each client (their sum at most the training rows)."""

    flwr_class = "SizePartitioner"
    sized_by_client_count = False
    method: Literal["size"] = Field(description=METHOD)
    partition_sizes: list[PositiveInt] = Field(min_length=1, description="The row count of each client, in order.")


class DirichletPartition(_Partition):
    """``DirichletPartitioner``: each class spread over clients in proportions drawn from Dirichlet(``alpha``)."""

    flwr_class = "DirichletPartitioner"
    partitions_by_label = True
    seeded = True
    method: Literal["dirichlet"] = Field(description=METHOD)
    alpha: Alpha = Field(description=ALPHA)
    self_balancing: StrictBool = Field(
        False, description="Stop giving a class's rows to a client that already holds more than an equal share."
    )
    shuffle: StrictBool = Field(True, description=SHUFFLE)

    def flwr_params(self, num_clients: int, label: str, seed: int) -> dict[str, Any]:
        """As every partitioner's, and FLTest's floor as flwr-datasets' ``min_partition_size`` (it redraws until it holds)."""
        return {**super().flwr_params(num_clients, label, seed), "min_partition_size": self.min_samples_per_client}


class InnerDirichletPartition(_Partition):
    """``InnerDirichletPartitioner``: given client sizes, each client's classes drawn from Dirichlet(``alpha``)."""

    flwr_class = "InnerDirichletPartitioner"
    partitions_by_label = True
    sized_by_client_count = False
    seeded = True
    method: Literal["inner_dirichlet", "inner-dirichlet"] = Field(description=METHOD)
    partition_sizes: list[PositiveInt] = Field(min_length=1, description="The row count of each client, in order.")
    alpha: Alpha = Field(description=ALPHA)
    shuffle: StrictBool = Field(True, description=SHUFFLE)


class ShardPartition(_Partition):
    """``ShardPartitioner``: rows sorted by label cut into shards, dealt out ``num_shards_per_partition`` a client."""

    flwr_class = "ShardPartitioner"
    partitions_by_label = True
    seeded = True
    method: Literal["shard", "shards"] = Field(description=METHOD)
    num_shards_per_partition: PositiveInt | None = Field(
        None,
        validation_alias=AliasChoices("num_shards_per_partition", "shards_per_client"),
        description="Shards each client gets (`shards_per_client`, FLTest's earlier spelling, too).",
    )
    shard_size: PositiveInt | None = Field(
        None, description="Rows a shard holds (instead of, or with, the shard count)."
    )
    keep_incomplete_shard: StrictBool = Field(False, description="Deal out the last shard when it is not full.")
    shuffle: StrictBool = Field(True, description=SHUFFLE)


class PathologicalPartition(_Partition):
    """``PathologicalPartitioner``: each client holds ``num_classes_per_partition`` classes."""

    flwr_class = "PathologicalPartitioner"
    partitions_by_label = True
    seeded = True
    method: Literal["pathological"] = Field(description=METHOD)
    num_classes_per_partition: PositiveInt = Field(description="The number of classes each client holds.")
    class_assignment_mode: Literal["random", "deterministic", "first-deterministic"] = Field(
        "random", description="How classes are assigned to clients (flwr-datasets' modes)."
    )
    shuffle: StrictBool = Field(True, description=SHUFFLE)


class NaturalIdPartition(_Partition):
    """``NaturalIdPartitioner``: one client per distinct value of column ``partition_by`` (e.g. a writer id)."""

    flwr_class = "NaturalIdPartitioner"
    sized_by_client_count = False
    method: Literal["natural_id", "natural-id"] = Field(description=METHOD)
    partition_by: str = Field(description="The column whose distinct values make the clients (e.g. a writer id).")


class ContinuousPartition(_Partition):
    """``ContinuousPartitioner``: rows ordered by the numeric column ``partition_by``, ``strictness`` in [0, 1]."""

    flwr_class = "ContinuousPartitioner"
    seeded = True
    method: Literal["continuous"] = Field(description=METHOD)
    partition_by: str = Field(description="The numeric column the rows are ordered by.")
    strictness: Annotated[float, Field(ge=0, le=1)] = Field(
        description="0: the column does not matter (near iid); 1: the rows go to clients strictly in its order."
    )
    shuffle: StrictBool = Field(True, description=SHUFFLE)


METHOD_ALIASES = {"shards": "shard", "inner-dirichlet": "inner_dirichlet", "natural-id": "natural_id"}
_MODELS = {
    "iid": IidPartition, "linear": LinearPartition, "square": SquarePartition, "exponential": ExponentialPartition,
    "size": SizePartition, "dirichlet": DirichletPartition, "inner_dirichlet": InnerDirichletPartition,
    "shard": ShardPartition, "pathological": PathologicalPartition, "natural_id": NaturalIdPartition,
    "continuous": ContinuousPartition,
}  # fmt: skip
PARTITION_METHODS = tuple(_MODELS)


def partition_method(value: Any) -> str | None:
    """The union tag of a partition: its ``method`` (``iid`` when absent), aliases mapped to one name."""
    method = value.get("method", "iid") if isinstance(value, dict) else getattr(value, "method", None)
    return METHOD_ALIASES.get(method, method) if isinstance(method, str) else None


PartitionConfig = Annotated[
    Union[tuple(Annotated[model, Tag(method)] for method, model in _MODELS.items())],  # type: ignore[valid-type]  # noqa: UP007 (a union built from a table: no | form)
    Discriminator(partition_method),
]


def without_partition_method(loc: tuple) -> tuple:
    """An error's location without the method pydantic puts after ``partition``."""
    return loc[:1] + loc[2:] if len(loc) > 1 and loc[0] == "partition" and loc[1] in _MODELS else loc


def describe_partition_error(error: dict[str, Any]) -> str | None:
    """``partition.method: ...`` for an unknown method, or ``None`` for any other error."""
    if error["loc"][:1] != ("partition",) or error["type"] not in ("union_tag_invalid", "union_tag_not_found"):
        return None
    found = error.get("ctx", {}).get("tag", "?")
    return f"partition.method: {found!r}: expected one of {', '.join(PARTITION_METHODS)}"
