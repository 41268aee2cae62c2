"""The NVFlare server side: NVFlare's FedAvg and Scaffold with FLTest's seeded selection and partition-ordered sums.

These classes are instantiated by NVFlare in the simulator's server process, from
the arguments in the exported job config (FedOpt's, which imports torch: :mod:`fltest.backends.nvflare.fedopt`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.aggregators.model_aggregator import ModelAggregator
from nvflare.app_common.workflows.fedavg import FedAvg
from nvflare.app_common.workflows.scaffold import Scaffold

from fltest.backends.nvflare.exchange import RunFiles, partition_of, site_name
from fltest.fedavg import ClientUpdate, aggregate, select_clients
from fltest.params import keyed, load_params, unkeyed
from fltest.rounds import RoundResult

TASK_CHECK_PERIOD_S = 0.1  # how often the workflow checks for replies (NVFlare's default: 0.5 s)


class PartitionOrderAggregator(ModelAggregator):
    """Keeps every reply of a round and averages them in partition order with :func:`fltest.fedavg.aggregate`:
    the clients' models, or their changes (which the workflow then adds to the global model), each parameter by its
    key: a filter may have left some out of every reply, and the workflow adds only those that remain.

    NVFlare's own FedAvg adds replies as they arrive, so its sum depends on timing;
    sorting first makes the result the reference backend's, bit for bit.
    """

    def __init__(self) -> None:
        """Start with no replies and no expected clients."""
        super().__init__()
        self._updates: dict[int, ClientUpdate] = {}
        self._expected: list[int] = []
        self._params_type = ParamsType.FULL  # the replies' kind: the workflow adds a DIFF to the global model
        self._keys: list[str] = []  # the replies' parameters, in order

    def expect(self, partitions: list[int]) -> None:
        """The partitions that must reply in the round that starts now."""
        self._expected = partitions

    def accept_model(self, model: FLModel) -> None:
        """Keep one client's reply (its example count travels as ``NUM_STEPS_CURRENT_ROUND``)."""
        partition = partition_of(model.meta["client_name"])
        self._params_type = model.params_type  # a model, or a change (clients sharing part of it)
        self._keys = sorted(model.params)  # all of the model's, or those a filter left (ExcludeVars)
        self._updates[partition] = ClientUpdate(
            partition_id=partition,
            params=[np.asarray(model.params[key], dtype=np.float64) for key in self._keys],
            num_examples=int(model.meta[FLMetaKey.NUM_STEPS_CURRENT_ROUND]),
            metrics=dict(model.metrics or {}),
        )

    def aggregate_model(self) -> FLModel:
        """The weighted average of the round's replies; fails unless every expected client replied."""
        answered = sorted(self._updates)
        if answered != self._expected:
            missing = sorted(set(self._expected) - set(answered))
            raise RuntimeError(f"no reply from clients {missing}")
        params, metrics = aggregate([self._updates[p] for p in answered])
        self.reset_stats()
        return FLModel(params=dict(zip(self._keys, params)), params_type=self._params_type, metrics=metrics)

    def reset_stats(self) -> None:
        """Forget the round's replies."""
        self._updates = {}


class FLTestRounds:
    """FLTest's part in each of its NVFlare controllers: the rounds' partitions, the initial model, the round files.

    Put before one of NVFlare's controllers (FedAvg, FedOpt, Scaffold), which does the rest. It trains the
    partitions :func:`fltest.fedavg.select_clients` picks, loads the float64 initial model from the run's
    workspace, and writes the global model after every round there, where the fltest driver records it.
    """

    num_clients: int
    current_round: int

    def take_part(self, seed: int, fraction_fit: float, workspace: str) -> None:
        """Select with ``seed`` and ``fraction_fit``; read and write the run's files under ``workspace``."""
        self.seed = seed
        self.fraction_fit = fraction_fit
        self.workspace = workspace
        self._files = RunFiles(Path(workspace))
        self.selected: list[int] = []

    def load_model(self) -> FLModel:
        """The initial model from ``initial.npz``."""
        params = load_params(self._files.initial_params)
        return FLModel(params_type=ParamsType.FULL, params=keyed(params))

    def sample_clients(self, num_clients: int | None = None) -> list[str]:
        """The sites of the partitions FLTest selects for this round (rounds count from 1 in FLTest)."""
        self.selected = select_clients(self.num_clients, self.fraction_fit, self.seed, self.current_round + 1)
        self.info(f"round {self.current_round + 1}: training partitions {self.selected}")  # type: ignore[attr-defined]
        return [site_name(p) for p in self.selected]

    def save_model(self, model: FLModel) -> None:
        """Write the round's global model, train metrics and clients for the driver."""
        self._files.write_round(
            RoundResult(self.current_round + 1, unkeyed(model.params), dict(model.metrics or {}), self.selected)
        )


class PartitionOrderRounds(FLTestRounds):
    """FLTest's part in NVFlare's FedAvg and its subclasses: the replies are averaged by :class:`PartitionOrderAggregator`."""

    aggregator: PartitionOrderAggregator

    def sample_clients(self, num_clients: int | None = None) -> list[str]:
        """The selected partitions' sites, whose replies the aggregator then expects."""
        sites = super().sample_clients(num_clients)
        self.aggregator.expect(self.selected)
        return sites


class FLTestFedAvg(PartitionOrderRounds, FedAvg):
    """NVFlare's FedAvg workflow on FLTest's rounds (:class:`FLTestRounds`), failing the job on any client error
    (``ignore_result_error=False``)."""

    def __init__(
        self,
        num_clients: int,
        num_rounds: int,
        seed: int,
        fraction_fit: float,
        workspace: str,
        fedprox_mu: float | None = None,
    ) -> None:
        """FedAvg over ``num_clients`` clients for ``num_rounds`` rounds; ``workspace`` is the run's folder.

        ``fedprox_mu``: NVFlare's FedProx, which sends its clients ``fedprox_mu`` with every model.
        """
        super().__init__(
            num_clients=num_clients,
            num_rounds=num_rounds,
            persistor_id="",
            aggregator=PartitionOrderAggregator(),
            ignore_result_error=False,
            task_check_period=TASK_CHECK_PERIOD_S,
            fedprox_mu=fedprox_mu,
        )
        self.take_part(seed, fraction_fit, workspace)


class FLTestScaffold(FLTestRounds, Scaffold):
    """NVFlare's Scaffold workflow on FLTest's rounds, its own aggregation (``scaffold_aggregate_fn``) over the
    replies in partition order, failing the job on any client error.

    It sends the global control variate ``c`` in each model's meta (``SCAFFOLD_CTRL_GLOBAL``), takes the new global
    model as the clients' models averaged weighted by ``NUM_STEPS_CURRENT_ROUND`` (FLTest's clients send their
    example counts there, as for FedAvg), and adds to ``c`` the clients' ``SCAFFOLD_CTRL_DIFF`` averaged alike.
    """

    def __init__(self, num_clients: int, num_rounds: int, seed: int, fraction_fit: float, workspace: str) -> None:
        """Scaffold over ``num_clients`` clients for ``num_rounds`` rounds; ``workspace`` is the run's folder."""
        super().__init__(
            num_clients=num_clients,
            num_rounds=num_rounds,
            persistor_id="",
            ignore_result_error=False,
            task_check_period=TASK_CHECK_PERIOD_S,
        )
        self.take_part(seed, fraction_fit, workspace)

    def aggregate(
        self, results: list[FLModel], aggregate_fn: Callable[[list[FLModel]], FLModel] | None = None
    ) -> FLModel:
        """NVFlare's aggregation of the round's replies, sorted by partition; fails unless every selected client replied."""
        by_partition = sorted(results, key=lambda result: partition_of(result.meta["client_name"]))
        answered = [partition_of(result.meta["client_name"]) for result in by_partition]
        if answered != self.selected:
            raise RuntimeError(f"no reply from clients {sorted(set(self.selected) - set(answered))}")
        return super().aggregate(by_partition, aggregate_fn)
