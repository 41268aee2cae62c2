"""NVFlare's PyTorch FedOpt controller on FLTest's rounds: FedAvgM, FedAdagrad and FedAdam for a TorchClassifier model.

NVFlare 2.9's ``nvflare.app_opt.pt.fedopt_ctl.FedOpt`` is its FedAvg workflow whose server holds a
``torch.nn.Module``: after each round it sets every named parameter's gradient to minus the clients'
mean change and steps a ``torch.optim`` optimizer over the module (then its learning-rate scheduler);
the module's buffers (BatchNorm's running statistics, ``num_batches_tracked``) get the mean change
added instead. FLTest hands it the experiment's network (``TorchClassifier``'s, holding the initial
model, in float64 as FLTest's global model is), the experiment's optimizer, and a constant learning
rate in place of its default cosine schedule. FLTest adds what it adds to FedAvg (:class:`PartitionOrderRounds`)
and names the parameters as the module does, which FedOpt matches them by.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_opt.pt.fedopt_ctl import FedOpt

from fltest.backends.nvflare.exchange import RunSpec
from fltest.backends.nvflare.server import TASK_CHECK_PERIOD_S, PartitionOrderAggregator, PartitionOrderRounds
from fltest.model import load_model
from fltest.model.torch_classifier import torch_classifier_of
from fltest.params import keyed, load_params, unkeyed

# FLTest's strategies have no server learning-rate schedule: FedOpt's scheduler multiplies the rate by 1.
CONSTANT_LEARNING_RATE = {"path": "torch.optim.lr_scheduler.ConstantLR", "args": {"factor": 1.0, "total_iters": 0}}


class FLTestFedOpt(PartitionOrderRounds, FedOpt):
    """NVFlare's FedOpt, its optimizer ``server_optimizer`` (a ``torch.optim`` class path) with ``server_optimizer_args``,
    over the experiment's network on the server's CPU, failing the job on any client error."""

    def __init__(
        self,
        num_clients: int,
        num_rounds: int,
        seed: int,
        fraction_fit: float,
        workspace: str,
        server_optimizer: str,
        server_optimizer_args: dict[str, Any],
    ) -> None:
        """FedOpt over ``num_clients`` clients for ``num_rounds`` rounds; ``workspace`` is the run's folder."""
        super().__init__(
            num_clients=num_clients,
            num_rounds=num_rounds,
            persistor_id="",
            aggregator=PartitionOrderAggregator(),
            ignore_result_error=False,
            task_check_period=TASK_CHECK_PERIOD_S,
            source_model="",  # the network, built in :meth:`run`
            optimizer_args={"path": server_optimizer, "args": dict(server_optimizer_args)},
            lr_scheduler_args=CONSTANT_LEARNING_RATE,
            device="cpu",
        )
        self.take_part(seed, fraction_fit, workspace)
        self.server_optimizer = server_optimizer
        self.server_optimizer_args = server_optimizer_args
        self.names: list[str] = []

    def run(self) -> None:
        """Build the network holding the initial model, then run NVFlare's FedOpt."""
        spec = RunSpec.read(self._files.spec)
        classifier = torch_classifier_of(load_model(spec.config.model))
        if classifier is None:
            raise RuntimeError(f"model.module {spec.config.model.module} is not built with TorchClassifier")
        network = classifier.network_holding(
            load_params(self._files.initial_params), spec.shards.feature_shape, torch.device("cpu"), torch.float64
        )
        self.names = list(network.state_dict())
        self.source_model = network
        super().run()

    def update_model(self, global_model: FLModel, aggr_result: FLModel) -> FLModel:
        """FedOpt's step from the clients' mean change: the average of their models minus the global model.

        (NVFlare's own clients would send their changes, averaged by NVFlare; the average of the models minus
        the global model is the same number up to rounding.)
        """
        current, average = unkeyed(global_model.params), unkeyed(aggr_result.params)
        global_model.params = dict(zip(self.names, current))
        change = FLModel(
            params_type=ParamsType.DIFF,
            params={n: a - x for n, a, x in zip(self.names, average, current)},
            metrics=aggr_result.metrics,
            meta=aggr_result.meta,
        )
        updated = super().update_model(global_model, change)
        # Copies: FedOpt's arrays share the module's memory, which its optimizer changes next round.
        updated.params = keyed([np.array(updated.params[name], dtype=np.float64) for name in self.names])
        return updated
