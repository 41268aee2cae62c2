"""NVFlare 2.9's own implementation of each of FLTest's strategies, configured with the experiment's parameters, or why it has none.

- FedAvg, FedProx: its FedAvg workflow (FedProx: ``fedprox_mu``, which it sends its clients).
- FedAvgM, FedAdagrad, FedAdam: its PyTorch FedOpt controller (:mod:`fltest.backends.nvflare.fedopt`), for a
  model built with ``TorchClassifier`` (FedOpt steps a ``torch.optim`` optimizer over the network).
- FedYogi, FedMedian, FedTrimmedAvg, Krum, Multi-Krum, Bulyan, q-FedAvg: none.
- SCAFFOLD: its Scaffold workflow (``nvflare.app_common.workflows.scaffold``, framework-agnostic: it averages
  the models and the control variates' changes the clients send), for any model; FLTest's clients take the
  control-variate steps (:mod:`fltest.control_variates`, option II, as NVFlare's ``PTScaffoldHelper``).
"""

from __future__ import annotations

import sys
from typing import Any

from fltest.backends.nvflare.exchange import RunFiles
from fltest.backends.nvflare.server import FLTestFedAvg, FLTestRounds, FLTestScaffold
from fltest.config.privacy import LocalGaussian, NoisedAveraging
from fltest.config.schema import ExperimentConfig
from fltest.config.strategies import (
    ROBUST,
    FedAdagradStrategy,
    FedAdamStrategy,
    FedAvgMStrategy,
    FedYogiStrategy,
    QFedAvgStrategy,
    ScaffoldStrategy,
    StrategyConfig,
)

NO_GAUSSIAN_PRIVACY = (
    "NVFlare 2.9 has no {mechanism}: its privacy filters (PercentilePrivacy, SVTPrivacy, ExcludeVars) share or drop "
    "parts of each client's update (SVTPrivacy with Laplace noise); none clips the update's norm and adds Gaussian "
    "noise"
)
NO_FEDYOGI = (
    "NVFlare 2.9 has no FedYogi (its FedOpt controller takes torch.optim's optimizers, and torch.optim has no Yogi)"
)
NO_ROBUST_AGGREGATION = (
    "NVFlare 2.9 has no {strategy}: its aggregators (nvflare.app_common.aggregators) sum the clients' updates, "
    "weighted; none takes a median, a trimmed mean or a Krum selection"
)
NO_QFEDAVG = (
    "NVFlare 2.9 has no q-FedAvg: its aggregators weigh a client by a number it sends, not by its loss to a power "
    "q, and no controller takes q-FFL's step"
)
FEDOPT_NEEDS_TORCH = (
    "NVFlare 2.9 has {strategy} only in its PyTorch FedOpt controller (nvflare.app_opt.pt.fedopt_ctl.FedOpt), which "
    "steps {optimizer} over a torch.nn.Module the server holds; this experiment's model is not built with "
    "TorchClassifier (fltest.model.torch_classifier), so FLTest has no network to give it"
)


def server_optimizer(strategy: StrategyConfig) -> tuple[str, dict[str, Any]] | None:
    """The ``torch.optim`` optimizer NVFlare's FedOpt runs ``strategy`` with, and its arguments; ``None`` if it is no FedOpt one.

    FedAvgM: SGD with the server learning rate and momentum. FedAdagrad: Adagrad, ``eps`` τ and its sum of
    squares starting at τ² (the paper's ``v_{-1}``). FedAdam: Adam, ``betas`` (β1, β2), ``eps`` τ.
    """
    if isinstance(strategy, FedAvgMStrategy):
        return "torch.optim.SGD", {"lr": strategy.server_learning_rate, "momentum": strategy.server_momentum}
    if isinstance(strategy, FedAdagradStrategy):
        return "torch.optim.Adagrad", {
            "lr": strategy.server_learning_rate,
            "eps": strategy.tau,
            "initial_accumulator_value": strategy.tau**2,
        }
    if isinstance(strategy, FedAdamStrategy):
        return "torch.optim.Adam", {
            "lr": strategy.server_learning_rate,
            "betas": [strategy.beta_1, strategy.beta_2],
            "eps": strategy.tau,
        }
    return None


def built_with_torch_classifier(config: ExperimentConfig) -> bool:
    """Whether the experiment's model module binds a ``TorchClassifier``'s functions (which then imported it: a
    model that did not is not one, and nothing here imports torch)."""
    torch_classifier = sys.modules.get("fltest.model.torch_classifier")
    if config.model.module is None or torch_classifier is None:
        return False
    from fltest.model import load_model

    return torch_classifier.torch_classifier_of(load_model(config.model)) is not None


def unsupported(config: ExperimentConfig) -> str | None:
    """Why NVFlare 2.9 cannot run the experiment's strategy with an implementation of its own, else ``None``."""
    strategy = config.training.strategy
    if isinstance(config.training.privacy, NoisedAveraging | LocalGaussian):
        return NO_GAUSSIAN_PRIVACY.format(mechanism=config.training.privacy.mechanism)
    if isinstance(strategy, FedYogiStrategy):
        return NO_FEDYOGI
    if isinstance(strategy, QFedAvgStrategy):
        return NO_QFEDAVG
    if strategy.name in ROBUST:
        return NO_ROBUST_AGGREGATION.format(strategy=strategy.name)
    optimizer = server_optimizer(strategy)
    if optimizer is not None and not built_with_torch_classifier(config):
        return FEDOPT_NEEDS_TORCH.format(strategy=strategy.name, optimizer=optimizer[0])
    return None


def server_controller(config: ExperimentConfig, files: RunFiles) -> FLTestRounds:
    """NVFlare's controller for the experiment's strategy (one it has: see :func:`unsupported`), on FLTest's rounds."""
    rounds = {
        "num_clients": config.clients,
        "num_rounds": config.training.rounds,
        "seed": config.seed,
        "fraction_fit": config.training.fraction_fit,
        "workspace": str(files.root),
    }
    if isinstance(config.training.strategy, ScaffoldStrategy):
        return FLTestScaffold(**rounds)
    optimizer = server_optimizer(config.training.strategy)
    if optimizer is not None:
        from fltest.backends.nvflare.fedopt import FLTestFedOpt  # imports torch: only for a FedOpt run

        return FLTestFedOpt(**rounds, server_optimizer=optimizer[0], server_optimizer_args=optimizer[1])
    return FLTestFedAvg(**rounds, fedprox_mu=config.training.strategy.proximal_mu or None)
