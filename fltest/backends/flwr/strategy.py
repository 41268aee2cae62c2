"""Flower's own strategies, training the partitions FLTest selects and failing loudly on any client error.

Each of the config's strategies is Flower's class of that name (``flwr.serverapp.strategy``:
FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam, FedYogi) with the experiment's parameters; FLTest
adds only which partitions train and the order their replies are summed in (partition order).
Flower has no SCAFFOLD: such a run is ``unsupported`` (:mod:`fltest.backends.flwr.unsupported`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.constant import HEARTBEAT_PATIENCE, ErrorCode
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    Bulyan,
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedMedian,
    FedProx,
    FedTrimmedAvg,
    FedYogi,
    Krum,
    MultiKrum,
    QFedAvg,
)

from fltest.backends.flwr.client_app import EQUAL_WEIGHT_KEY, HOST_KEY, partition_of
from fltest.backends.flwr.ray_errors import describe_wrapped_error
from fltest.config.privacy import NoisedAveraging
from fltest.config.schema import TrainingConfig
from fltest.config.strategies import (
    BulyanStrategy,
    FedAdagradStrategy,
    FedAdamStrategy,
    FedAvgMStrategy,
    FedMedianStrategy,
    FedProxStrategy,
    FedTrimmedAvgStrategy,
    FedYogiStrategy,
    KrumStrategy,
    MultiKrumStrategy,
    QFedAvgStrategy,
)
from fltest.errors import RunFailed
from fltest.fedavg import LOSS_BEFORE_TRAINING, select_clients

#: How long a server asks a node that failed round 1 which partition it holds, before it names it by its id.
NAMING_QUERY_S = 15.0


def wait_for_nodes(grid: Grid, expected: int, timeout: float) -> list[int]:
    """The ids of the grid's nodes, sorted, once ``expected`` of them are connected (within ``timeout`` s).

    More nodes than clients fail the run: each node holds one client's partition.
    """
    deadline = time.monotonic() + timeout
    while len(node_ids := sorted(grid.get_node_ids())) < expected:
        if time.monotonic() > deadline:
            raise RunFailed(f"only {len(node_ids)} of {expected} Flower nodes came up in {timeout:.0f} s")
        time.sleep(0.1)
    if len(node_ids) > expected:
        raise RunFailed(f"{len(node_ids)} Flower nodes are connected for {expected} clients: one node a client")
    return node_ids


def query_partitions(grid: Grid, node_ids: list[int], timeout: float, hosts: dict[int, str]) -> dict[int, int]:
    """Ask every node for its partition id; returns ``{node_id: partition_id}``.

    A reply that names its machine (a ``host`` record) is noted in ``hosts`` as
    ``{node_id: hostname}``. An error reply is matched to its node through the query it
    answers: the SuperLink's own replies (a node gone) carry the SuperLink's node id.
    """
    queries = [
        Message(RecordDict({"config": ConfigRecord()}), dst_node_id=node, message_type=MessageType.QUERY)
        for node in node_ids
    ]
    mapping = {}
    replies = grid.send_and_receive(queries, timeout=timeout)
    queried = {query.metadata.message_id: query.metadata.dst_node_id for query in queries}  # ids set by the push
    for reply in replies:
        node = queried.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
        if reply.has_error():
            raise RunFailed(f"client on Flower node {node} failed: {_reason(reply)}")
        mapping[node] = partition_of(reply)
        if HOST_KEY in reply.content:
            hosts[node] = str(reply.content[HOST_KEY]["hostname"])
    if len(mapping) != len(node_ids):
        raise RunFailed(f"{len(mapping)} of {len(node_ids)} clients answered within {timeout:.0f} s")
    return mapping


def _reason(reply: Message) -> str:
    """The last line of a client's error (the exception itself), not the whole traceback.

    A node the SuperLink declared gone (no heartbeat) is said so in plain words.
    """
    if reply.error.code == ErrorCode.NODE_UNAVAILABLE:
        return f"node unavailable: no heartbeat for {HEARTBEAT_PATIENCE} heartbeat intervals (stopped, or cut off from the SuperLink)"
    wrapped = describe_wrapped_error(reply.error.reason)  # a Ray node lost: named, with the cause
    if wrapped:
        return wrapped
    lines = [line for line in reply.error.reason.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"error code {reply.error.code}"


class SelectedPartitions:
    """Put before one of Flower's strategy classes: it trains the partitions :func:`fltest.fedavg.select_clients` picks.

    Replies are summed in partition order, as the reference backend sums them; a
    client error or a missing reply fails the run instead of shrinking the round.
    ``client_hosts`` collects the machines (Ray nodes) the clients trained on. Without a
    ``node_to_partition`` (no query before round 1), round 1 trains every node and its replies
    say which node holds which partition; a node whose reply is an error is asked (:meth:`_failed_in_round_1`).
    """

    def __init__(
        self,
        node_ids: list[int],
        node_to_partition: dict[int, int] | None,
        seed: int,
        fraction: float,
        node_label: str | None = None,
        node_hosts: Mapping[int, str] | None = None,
        **flower_parameters: float | str,
    ) -> None:
        """Train the nodes ``node_ids``, whose partitions ``node_to_partition`` gives (``None``: learnt in round 1);
        ``seed``/``fraction`` drive the selection.

        ``node_label`` names a node in error lines by its host (``SuperNode`` gives ``SuperNode <hostname>``),
        as ``node_hosts`` (``{node_id: hostname}``) and the replies tell it; ``flower_parameters`` go to the
        Flower strategy (``eta``, ``proximal_mu``, ...).
        """
        every_node = len(node_ids)  # Flower configures them all; the selected ones are sent
        super().__init__(
            fraction_train=1.0,
            min_train_nodes=every_node,
            fraction_evaluate=0.0,  # type: ignore[call-arg]
            min_available_nodes=every_node,
            **flower_parameters,
        )
        self.node_ids = list(node_ids)
        self.node_to_partition: dict[int, int] = {}
        self.partition_to_node: dict[int, int] = {}
        if node_to_partition is not None:
            self._know_partitions(node_to_partition)
        self.seed = seed
        self.fraction = fraction
        self.selected: dict[int, list[int]] = {}
        self.train_metrics: dict[int, dict[str, float]] = {}
        self.client_hosts: set[str] = set()
        self.node_label = node_label
        self.node_hosts = dict(node_hosts or {})
        self._sent: dict[int, list[Message]] = {}  # a round's train messages; the grid sets their ids when it pushes
        self._grid: Grid | None = None  # the grid of the rounds, once the first is configured
        self.last_aggregate: ArrayRecord | None = None  # the last round's, as a DP wrapper got it (before its noise)

    def _know_partitions(self, node_to_partition: dict[int, int]) -> None:
        self.node_to_partition = dict(node_to_partition)
        self.partition_to_node = {p: n for n, p in node_to_partition.items()}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The Flower strategy's train messages (its state and config: FedOpt's current model, FedProx's
        ``proximal-mu``), kept for the selected partitions' nodes only, in partition order (node order while
        the partitions are not known yet: every node trains then)."""
        selected = select_clients(len(self.node_ids), self.fraction, self.seed, server_round)
        self.selected[server_round] = selected
        self._grid = grid  # to ask a node that fails round 1 which partition it holds
        by_node = {m.metadata.dst_node_id: m for m in super().configure_train(server_round, arrays, config, grid)}  # type: ignore[misc]
        if self.node_to_partition:
            self._sent[server_round] = [by_node[self.partition_to_node[p]] for p in selected]
        else:
            self._sent[server_round] = [by_node[node] for node in self.node_ids]
        return self._sent[server_round]

    def _host_name(self, node: int) -> str | None:
        """``<node_label> <host>, Flower node <id>`` where ``node_label`` asks and the node's host is known."""
        host = self.node_hosts.get(node)
        return f"{self.node_label} {host}, Flower node {node}" if self.node_label and host else None

    def _node(self, node: int) -> str:
        """A node as error lines name it: by its host where known, else by its Flower node id."""
        return self._host_name(node) or f"Flower node {node}"

    def _client(self, partition: int, node: int | None = None) -> str:
        """A client as error lines name it: its partition, and its node (``node``, else the partition's) where its
        host is named."""
        name = self._host_name(self.partition_to_node[partition] if node is None else node)
        return f"client {partition} ({name})" if name else f"client {partition}"

    def _failed_in_round_1(self, node: int, reply: Message) -> str:
        """A node whose round-1 reply is an error, named as :meth:`_client` names a client: it is asked which
        partition it holds (and its host) for at most :data:`NAMING_QUERY_S`; by its node if it does not say
        or is gone (the SuperLink's reply for a node without heartbeat)."""
        if reply.error.code == ErrorCode.NODE_UNAVAILABLE:
            return f"client on {self._node(node)}"
        hosts: dict[int, str] = {}
        try:
            partition = query_partitions(self._grid, [node], NAMING_QUERY_S, hosts)[node]
        except RunFailed:  # its ClientApp cannot answer either, or the node is gone
            return f"client on {self._node(node)}"
        self.node_hosts.update(hosts)
        return self._client(partition, node)

    def _nodes_replying(self, server_round: int, replies: list[Message]) -> list[int]:
        """The node each reply answers for, through the train message it replies to.

        Not through its sender: the SuperLink's error reply for a node gone has the
        SuperLink's own node id as its source.
        """
        sent = {m.metadata.message_id: m.metadata.dst_node_id for m in self._sent[server_round]}
        unknown = [r.metadata.reply_to_message_id for r in replies if r.metadata.reply_to_message_id not in sent]
        if unknown:
            raise RunFailed(f"round {server_round}: a reply to no message of this round ({unknown[0]!r})")
        return [sent[r.metadata.reply_to_message_id] for r in replies]

    def _learn_partitions(self, server_round: int, nodes: list[int], replies: list[Message]) -> None:
        """The partitions of every node from its first training reply; an error or a missing reply fails the run."""
        for node, reply in zip(nodes, replies):
            if reply.has_error():
                raise RunFailed(
                    f"round {server_round}: {self._failed_in_round_1(node, reply)} failed: {_reason(reply)}"
                )
        missing = sorted(set(self.node_ids) - set(nodes))
        if missing:
            raise RunFailed(f"round {server_round}: no reply in time from {', '.join(map(self._node, missing))}")
        self._know_partitions({node: partition_of(reply) for node, reply in zip(nodes, replies)})
        if sorted(self.partition_to_node) != list(range(len(self.node_ids))):
            raise RunFailed(
                f"round {server_round}: the clients' partition ids are {sorted(self.node_to_partition.values())}, "
                f"not 0..{len(self.node_ids) - 1} once each"
            )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check every selected client replied without error, then average in partition order."""
        replies = list(replies)
        nodes = self._nodes_replying(server_round, replies)
        for node, reply in zip(nodes, replies):
            if not reply.has_error() and HOST_KEY in reply.content:
                self.node_hosts[node] = str(reply.content[HOST_KEY]["hostname"])
        if not self.node_to_partition:
            self._learn_partitions(server_round, nodes, replies)
        by_partition = sorted(zip((self.node_to_partition[node] for node in nodes), replies), key=lambda pair: pair[0])
        for partition, reply in by_partition:
            if reply.has_error():
                raise RunFailed(f"round {server_round}: {self._client(partition)} failed: {_reason(reply)}")
        answered = [partition for partition, _ in by_partition]
        replies = [reply for _, reply in by_partition]
        if answered != self.selected[server_round]:
            missing = sorted(set(self.selected[server_round]) - set(answered))
            raise RunFailed(f"round {server_round}: no reply in time from {', '.join(map(self._client, missing))}")
        self.client_hosts.update(str(m.content[HOST_KEY]["hostname"]) for m in replies)
        arrays, metrics = super().aggregate_train(server_round, replies)  # type: ignore[misc]
        self.last_aggregate = arrays
        self.train_metrics[server_round] = {k: float(v) for k, v in (metrics or {}).items()}
        return arrays, metrics


class SelectedFedAvg(SelectedPartitions, FedAvg):
    """Flower's FedAvg on FLTest's selection."""


class SelectedFedProx(SelectedPartitions, FedProx):
    """Flower's FedProx on FLTest's selection: FedAvg that sends its clients ``proximal-mu``."""


class SelectedFedAvgM(SelectedPartitions, FedAvgM):
    """Flower's FedAvgM on FLTest's selection."""


class SelectedFedAdagrad(SelectedPartitions, FedAdagrad):
    """Flower's FedAdagrad on FLTest's selection."""


class SelectedFedAdam(SelectedPartitions, FedAdam):
    """Flower's FedAdam on FLTest's selection."""


class SelectedFedYogi(SelectedPartitions, FedYogi):
    """Flower's FedYogi on FLTest's selection."""


class SelectedFedMedian(SelectedPartitions, FedMedian):
    """Flower's FedMedian on FLTest's selection."""


class SelectedFedTrimmedAvg(SelectedPartitions, FedTrimmedAvg):
    """Flower's FedTrimmedAvg on FLTest's selection."""


class SelectedKrum(SelectedPartitions, Krum):
    """Flower's Krum on FLTest's selection."""


class SelectedMultiKrum(SelectedPartitions, MultiKrum):
    """Flower's MultiKrum on FLTest's selection."""


class SelectedBulyan(SelectedPartitions, Bulyan):
    """Flower's Bulyan on FLTest's selection."""


class SelectedQFedAvg(SelectedPartitions, QFedAvg):
    """Flower's QFedAvg on FLTest's selection."""


def flower_strategy(
    training: TrainingConfig,
    node_ids: list[int],
    node_to_partition: dict[int, int] | None,
    seed: int,
    node_label: str | None = None,
    node_hosts: Mapping[int, str] | None = None,
) -> SelectedPartitions:
    """Flower's own class for ``training.strategy``, given the experiment's parameters under Flower's names, on the
    selection ``training.fraction_fit`` and ``seed`` draw (the other arguments: :class:`SelectedPartitions`).

    Under DP-FedAvg (``training.privacy``: fixed or adaptive clipping; FedAvg or FedProx) it weighs the clients' models by :data:`EQUAL_WEIGHT_KEY`, for
    the DP wrapper around it (:func:`fltest.backends.flwr.privacy.private_strategy`).
    Flower's FedAdagrad takes no ``beta_1`` (it keeps no momentum): the config's is not used there. Its QFedAvg gets
    the clients' learning rate and reads each client's loss before training (the paper's ``F_k(w_t)``), not the
    training loss it reads by default.
    """
    strategy = training.strategy
    selection = (node_ids, node_to_partition, seed, training.fraction_fit, node_label, node_hosts)
    if isinstance(training.privacy, NoisedAveraging):  # DP-FedAvg's equal weights (fltest.backends.flwr.privacy)
        mu = {"proximal_mu": strategy.mu} if isinstance(strategy, FedProxStrategy) else {}
        private = SelectedFedProx if mu else SelectedFedAvg
        return private(*selection, weighted_by_key=EQUAL_WEIGHT_KEY, **mu)
    if isinstance(strategy, FedProxStrategy):
        return SelectedFedProx(*selection, proximal_mu=strategy.mu)
    if isinstance(strategy, FedAvgMStrategy):
        return SelectedFedAvgM(
            *selection, server_learning_rate=strategy.server_learning_rate, server_momentum=strategy.server_momentum
        )
    if isinstance(strategy, FedAdagradStrategy):
        return SelectedFedAdagrad(*selection, eta=strategy.server_learning_rate, tau=strategy.tau)
    if isinstance(strategy, FedAdamStrategy | FedYogiStrategy):
        adaptive = SelectedFedAdam if isinstance(strategy, FedAdamStrategy) else SelectedFedYogi
        return adaptive(
            *selection,
            eta=strategy.server_learning_rate,
            beta_1=strategy.beta_1,
            beta_2=strategy.beta_2,
            tau=strategy.tau,
        )
    if isinstance(strategy, FedMedianStrategy):
        return SelectedFedMedian(*selection)
    if isinstance(strategy, FedTrimmedAvgStrategy):
        return SelectedFedTrimmedAvg(*selection, beta=strategy.beta)
    if isinstance(strategy, MultiKrumStrategy):
        return SelectedMultiKrum(
            *selection, num_malicious_nodes=strategy.num_malicious, num_nodes_to_select=strategy.num_selected
        )
    if isinstance(strategy, KrumStrategy):
        return SelectedKrum(*selection, num_malicious_nodes=strategy.num_malicious)
    if isinstance(strategy, BulyanStrategy):
        return SelectedBulyan(*selection, num_malicious_nodes=strategy.num_malicious)
    if isinstance(strategy, QFedAvgStrategy):
        return SelectedQFedAvg(
            *selection,
            client_learning_rate=training.learning_rate,
            q=strategy.q,
            train_loss_key=LOSS_BEFORE_TRAINING,
        )
    return SelectedFedAvg(*selection)
