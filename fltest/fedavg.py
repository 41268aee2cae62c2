"""The parts of FedAvg every backend shares, so that all of them compute the same thing.

A backend supplies only the transport: it calls :func:`select_clients` on the
server, :func:`client_update` on each client, :func:`aggregate` on the replies
(sorted by partition id), and :func:`evaluate_global` on the new model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fltest.attacks import attacked
from fltest.blas_threads import one_blas_thread
from fltest.config.schema import ExperimentConfig, clients_per_round
from fltest.config.strategies import FedAvgStrategy, FedProxStrategy, QFedAvgStrategy
from fltest.hooks import Hooks, Metrics, check_metrics
from fltest.model import Model, load_model
from fltest.model.contract import CORRECTION
from fltest.model.load import naming_the_model, trained_params
from fltest.params import Params

#: The metric a client of a q-FedAvg run reports: its loss under the round's global model, before it trains.
LOSS_BEFORE_TRAINING = "loss_before_training"


def select_clients(num_clients: int, fraction: float, seed: int, server_round: int) -> list[int]:
    """The partition ids that train in ``server_round``: :func:`~fltest.config.schema.clients_per_round` of them."""
    count = clients_per_round(num_clients, fraction)
    if count >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, 2, server_round])
    return sorted(int(i) for i in rng.choice(num_clients, size=count, replace=False))


@dataclass(frozen=True)
class ClientUpdate:
    """One client's reply in one round."""

    partition_id: int
    params: Params
    num_examples: int
    metrics: Metrics = field(default_factory=dict)
    control_delta: Params | None = None  # SCAFFOLD: the change of the client's control variate, Δc_i


def client_seed(seed: int, server_round: int, partition_id: int) -> int:
    """The seed of one client's local training in one round, drawn from the experiment's seed."""
    return int(np.random.SeedSequence([seed, 3, server_round, partition_id]).generate_state(1)[0])


def with_proximal_mu(config: ExperimentConfig, mu: float) -> ExperimentConfig:
    """``config`` whose clients train with FedProx's proximal term weighted ``mu``, as a framework's FedProx
    server sent it to them (0: none)."""
    strategy = FedProxStrategy(name="fedprox", mu=mu) if mu > 0 else FedAvgStrategy()
    return config.model_copy(update={"training": config.training.model_copy(update={"strategy": strategy})})


def client_update(
    config: ExperimentConfig,
    hooks: Hooks,
    partition_id: int,
    server_round: int,
    params: Params,
    x: np.ndarray,
    y: np.ndarray,
    correction: Params | None = None,
) -> ClientUpdate:
    """Local training of one client in one round (the config's model), with the user's hooks around it.

    ``correction``: SCAFFOLD's ``c - c_i``, which the model's train adds to every gradient
    (:mod:`fltest.control_variates` passes it).
    """
    if hooks.before_local_training is not None:
        replaced = hooks.before_local_training(partition_id, server_round, x, y)
        if replaced is not None:
            x, y = replaced
    model, where = load_model(config.model), f"on client {partition_id} in round {server_round}"
    before: Metrics = {}
    if isinstance(config.training.strategy, QFedAvgStrategy):  # q-FedAvg weighs a client by F_k(w_t)
        with naming_the_model(model, "evaluate", where), one_blas_thread():
            before[LOSS_BEFORE_TRAINING] = float(model.evaluate(params, x, y).loss)
    with naming_the_model(model, "train", where), one_blas_thread():
        seed = client_seed(config.seed, server_round, partition_id)
        result = model.train(
            params, x, y, config.training, seed, **({} if correction is None else {CORRECTION: correction})
        )
    trained = trained_params(model, result.params, params, where)
    metrics: Metrics = check_metrics("the model's train", result.metrics) | before
    if hooks.after_local_training is not None:
        extra = hooks.after_local_training(partition_id, server_round, params, trained)
        metrics.update(check_metrics("hook after_local_training", extra))
    if config.attack is not None and partition_id in config.attack.clients:  # it tampers with what it sends
        trained = attacked(config.attack, config.seed, server_round, partition_id, params, trained)
    return ClientUpdate(partition_id=partition_id, params=trained, num_examples=len(y), metrics=metrics)


def aggregate(updates: Sequence[ClientUpdate]) -> tuple[Params, Metrics]:
    """Weighted average of the updates' parameters and metrics, by number of examples.

    Sums in the order given: callers sort by partition id so that every backend
    adds the same numbers in the same order.
    """
    total = sum(u.num_examples for u in updates)
    params = [np.zeros(np.shape(p)) for p in updates[0].params]  # float64, as parameters travel
    for update in updates:
        weight = update.num_examples / total
        for acc, p in zip(params, update.params):
            acc += p * weight
    names = sorted(set.intersection(*(set(u.metrics) for u in updates)))
    metrics = {n: float(sum(u.metrics[n] * u.num_examples for u in updates) / total) for n in names}
    return params, metrics


def evaluate_global(
    model: Model, params: Params, x: np.ndarray, y: np.ndarray, hooks: Hooks, server_round: int
) -> Metrics:
    """Test loss and accuracy of the global model after ``server_round`` (0: the initial model), the model's extra
    metrics, and the user's evaluation metrics."""
    with naming_the_model(model, "evaluate", f"in round {server_round}"):
        evaluation = model.evaluate(params, x, y)
    metrics: Metrics = {"loss": float(evaluation.loss), "accuracy": float(evaluation.accuracy)}
    metrics.update(check_metrics("the model's evaluate", evaluation.metrics))
    if hooks.evaluate_metrics is not None:
        metrics.update(check_metrics("hook evaluate_metrics", hooks.evaluate_metrics(y, evaluation.probabilities)))
    return metrics
