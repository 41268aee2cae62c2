"""Benchmark: the server's aggregation of one round, for FedAvg and each new strategy, Flower's own class against the
reference's rule, on the same synthetic client models.

Only the aggregation is timed: the reference's ``server_update(...).apply(global, updates)`` (updates in partition
order) against Flower's ``aggregate_train(round, replies)`` as FLTest runs it (its class behind
:class:`fltest.backends.flwr.strategy.SelectedPartitions`, whose checks and sort into partition order are included;
the replies come in a shuffled node order, as a grid returns them, and carry what FLTest's ClientApp puts in a reply).
The same Flower class is also timed alone (``class alone``: its ``aggregate_train`` on the replies already in partition
order), and ``wrapper`` is the median over rounds of the difference, what FLTest's checks add. Flower's side includes
what its classes do on every reply: reading each Array back from its bytes and averaging the replies' metrics.
Building the replies and ``configure_train`` (which q-FedAvg needs for the global model) are not timed; both sides run
on one BLAS thread, in this process, round after round.

Every client model is the global model plus its own noise; every client has the same number of examples, so that
Flower's Multi-Krum, which weighs the models it selects by their examples (the paper: their plain mean), averages as
the reference does. A q-FedAvg client reports its loss before training (:data:`fltest.fedavg.LOSS_BEFORE_TRAINING`).
Each strategy takes :func:`fltest.config.strategies.example_strategy`'s parameters (Krum and Bulyan: f = 0). The
model is a softmax regression, ``inputs × classes`` weights and ``classes`` biases, float64 (default: CIFAR-shaped,
3072 × 10 + 10). ``max |Δ|`` is the largest difference between Flower's new global model (both timings) and the
reference's, over the rounds: both sides timed the same aggregation. NVFlare has none of these strategies but FedAvg
(its runs of them are ``unsupported``): not timed here. The end-to-end runs of every strategy: ``bench/strategies.py``.
Run: ``python bench/aggregation_cost.py [--clients 120] [--rounds 5] [--inputs 3072] [--classes 10]``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity

from fltest.backends.flwr.client_app import HOST_KEY, INFO_KEY, PARAMS_KEY, params_to_record, record_to_params
from fltest.backends.flwr.strategy import SelectedPartitions, flower_strategy
from fltest.blas_threads import one_blas_thread
from fltest.config.schema import TrainingConfig
from fltest.config.strategies import ROBUST, example_strategy
from fltest.fedavg import LOSS_BEFORE_TRAINING, ClientUpdate
from fltest.params import Params
from fltest.server_update import server_update

STRATEGIES = ("fedavg", *ROBUST, "qfedavg")  # FedAvg, the baseline, then the new ones
EXAMPLES = 400  # every client's, so that Flower's Multi-Krum weighs the models it selects alike
SEED = 0
FIRST_NODE = 1000  # Flower node ids are not partition ids
T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """One strategy's medians over the rounds (seconds per round) and the largest difference of the models."""

    strategy: str
    reference_s: float
    flower_s: float
    class_alone_s: float
    wrapper_s: float
    max_difference: float


class NodeList:
    """The part of a Flower grid a strategy's ``configure_train`` reads: the connected nodes."""

    def __init__(self, node_ids: list[int]) -> None:
        self.node_ids = node_ids

    def get_node_ids(self) -> list[int]:
        """Every node, connected."""
        return self.node_ids


def act_as_the_server_app() -> None:
    """Give this process the identity Flower's ServerApp runtime gives its process (its messages carry the run's id),
    and quiet Flower's log of every round at INFO."""
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    logging.getLogger("flwr").setLevel(logging.ERROR)


def client_models(clients: int, inputs: int, classes: int, server_round: int) -> tuple[Params, list[ClientUpdate]]:
    """A round's global model and its clients' updates (partition order): each model the global one plus noise of
    its own, ``EXAMPLES`` examples each, a loss before training between 0.5 and 2.5."""
    rng = np.random.default_rng([SEED, server_round])
    global_params = [rng.normal(0.0, 0.1, (inputs, classes)), rng.normal(0.0, 0.1, classes)]
    updates = [
        ClientUpdate(
            partition_id=k,
            params=[p + rng.normal(0.0, 0.01, p.shape) for p in global_params],
            num_examples=EXAMPLES,
            metrics={LOSS_BEFORE_TRAINING: float(rng.uniform(0.5, 2.5))},
        )
        for k in range(clients)
    ]
    return global_params, updates


def replies(
    sent: Sequence[Message], updates: Sequence[ClientUpdate], node_to_partition: dict[int, int]
) -> list[Message]:
    """Each node's reply to its train message, with what FLTest's ClientApp puts in one: its client's model, its
    metrics with ``num-examples``, its host and its partition id (in the order of ``sent``)."""
    out = []
    for message in sent:
        message.metadata.__dict__["_message_id"] = str(uuid.uuid4())  # as a grid sets it when it pushes the message
        partition = node_to_partition[message.metadata.dst_node_id]
        update = updates[partition]
        content = RecordDict(
            {
                PARAMS_KEY: params_to_record(update.params),
                "metrics": MetricRecord({"num-examples": update.num_examples, **update.metrics}),
                HOST_KEY: ConfigRecord({"hostname": "bench"}),
                INFO_KEY: ConfigRecord({"partition-id": partition}),
            }
        )
        out.append(Message(content, reply_to=message))
    return out


def timed(aggregate: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Seconds ``aggregate(*args)`` takes (after a garbage collection) and what it returns."""
    gc.collect()
    start = time.perf_counter()
    result = aggregate(*args)
    return time.perf_counter() - start, result


def flower_params(result: tuple[ArrayRecord | None, MetricRecord | None]) -> Params:
    """The new global model of Flower's ``aggregate_train``; a strategy that returns none stops the benchmark."""
    arrays, _ = result
    if arrays is None:
        raise SystemExit("Flower's strategy returned no model")
    return record_to_params(arrays)


def max_difference(a: Params, b: Params) -> float:
    """The largest |a - b| over every parameter."""
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def measure(name: str, clients: int, rounds: int, inputs: int, classes: int) -> Timing:
    """Time ``name``'s aggregation on both sides for ``rounds`` rounds of ``clients`` clients, printing each round."""
    training = TrainingConfig(rounds=rounds, local_epochs=1, strategy=example_strategy(name))
    reference = server_update(training.strategy, clients, training.learning_rate)
    rng = np.random.default_rng(SEED)
    node_ids = [FIRST_NODE + k for k in range(clients)]
    node_to_partition = dict(zip(node_ids, (int(p) for p in rng.permutation(clients))))
    strategy = flower_strategy(training, node_ids, node_to_partition, SEED)
    grid = NodeList(node_ids)
    columns: dict[str, list[float]] = {"reference": [], "flower": [], "class": [], "difference": []}
    for server_round in range(1, rounds + 1):
        global_params, updates = client_models(clients, inputs, classes, server_round)
        reference_s, expected = timed(reference.apply, global_params, updates)

        sent = strategy.configure_train(server_round, params_to_record(global_params), ConfigRecord(), grid)
        arrived = replies(list(sent), updates, node_to_partition)
        rng.shuffle(arrived)  # a grid returns them in no order; FLTest sorts them
        flower_s, flower = timed(strategy.aggregate_train, server_round, arrived)

        sent = strategy.configure_train(server_round, params_to_record(global_params), ConfigRecord(), grid)
        ordered = replies(list(sent), updates, node_to_partition)  # partition order, as FLTest hands them on
        class_s, class_alone = timed(super(SelectedPartitions, strategy).aggregate_train, server_round, ordered)

        columns["reference"].append(reference_s)
        columns["flower"].append(flower_s)
        columns["class"].append(class_s)
        columns["difference"].append(
            max(max_difference(expected, flower_params(flower)), max_difference(expected, flower_params(class_alone)))
        )
        print(
            f"{name} round {server_round}/{rounds}: reference {reference_s:.4f} s, flower {flower_s:.4f} s "
            f"(class alone {class_s:.4f} s), max |Δ| {columns['difference'][-1]:.2e}",
            flush=True,
        )
    return Timing(
        strategy=name,
        reference_s=statistics.median(columns["reference"]),
        flower_s=statistics.median(columns["flower"]),
        class_alone_s=statistics.median(columns["class"]),
        wrapper_s=statistics.median([f - c for f, c in zip(columns["flower"], columns["class"])]),
        max_difference=max(columns["difference"]),
    )


def print_table(timings: list[Timing], clients: int, rounds: int, inputs: int, classes: int) -> None:
    """The table: a line a strategy, its medians in seconds per round, Flower/reference and max |Δ|."""
    parameters = inputs * classes + classes
    print(
        f"\naggregation of one round, {clients} clients, {parameters} float64 parameters ({inputs}x{classes} + "
        f"{classes}), median of {rounds} rounds, one BLAS thread; flower: as FLTest runs it (SelectedPartitions' "
        "checks included); NVFlare: none of these strategies but FedAvg, not timed"
    )
    print(
        f"{'strategy':14} {'reference s':>11} {'flower s':>10} {'flower/ref':>10} {'class alone s':>13} "
        f"{'wrapper s':>10} {'max |Δ|':>9}"
    )
    for t in timings:
        print(
            f"{t.strategy:14} {t.reference_s:11.6f} {t.flower_s:10.6f} {t.flower_s / t.reference_s:10.2f} "
            f"{t.class_alone_s:13.6f} {t.wrapper_s:+10.6f} {t.max_difference:9.2e}"
        )


def full_collection_s() -> float:
    """Seconds one full garbage collection (``gc.collect()``) takes in this process, the median of 5."""
    return statistics.median([timed(gc.collect)[0] for _ in range(5)])


def main() -> None:
    """Time every strategy's aggregation on both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=5, help="rounds timed per strategy (the medians')")
    parser.add_argument("--inputs", type=int, default=3072, help="the softmax regression's inputs (CIFAR: 3072)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument(
        "--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES), metavar="NAME", help="default: all"
    )
    args = parser.parse_args()
    act_as_the_server_app()
    with one_blas_thread():
        timings = [measure(name, args.clients, args.rounds, args.inputs, args.classes) for name in args.strategies]
    print_table(timings, args.clients, args.rounds, args.inputs, args.classes)
    print(
        f"one full garbage collection in this process: {full_collection_s():.4f} s (Flower's Bulyan and QFedAvg make "
        "one for each model they read, in ArrayRecord.to_numpy_ndarrays(keep_input=False))"
    )


if __name__ == "__main__":
    main()
