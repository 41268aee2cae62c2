"""FedAvg that trains the partitions FLTest selects and fails loudly on any client error."""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from fltest.backends.flwr.client_app import HOST_KEY
from fltest.errors import RunFailed
from fltest.fedavg import select_clients


def discover_partitions(grid: Grid, expected: int, timeout: float) -> dict[int, int]:
    """Ask every node for its partition id; returns ``{node_id: partition_id}``."""
    deadline = time.monotonic() + timeout
    while len(node_ids := sorted(grid.get_node_ids())) < expected:
        if time.monotonic() > deadline:
            raise RunFailed(f"only {len(node_ids)} of {expected} Flower nodes came up in {timeout:.0f} s")
        time.sleep(0.1)
    queries = [
        Message(RecordDict({"config": ConfigRecord()}), dst_node_id=node, message_type=MessageType.QUERY)
        for node in node_ids
    ]
    mapping = {}
    for reply in grid.send_and_receive(queries, timeout=max(deadline - time.monotonic(), 1.0)):
        if reply.has_error():
            raise RunFailed(f"client on node {reply.metadata.src_node_id} failed: {_reason(reply)}")
        mapping[reply.metadata.src_node_id] = int(reply.content["info"]["partition-id"])
    if len(mapping) != expected:
        raise RunFailed(f"{len(mapping)} of {expected} clients answered within {timeout:.0f} s")
    return mapping


def _reason(reply: Message) -> str:
    """The last line of a client's error (the exception itself), not the whole traceback."""
    lines = [line for line in reply.error.reason.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"error code {reply.error.code}"


class SelectedFedAvg(FedAvg):
    """Flower's FedAvg, training the partitions :func:`fltest.fedavg.select_clients` picks.

    Replies are summed in partition order, as the reference backend sums them; a
    client error or a missing reply fails the run instead of shrinking the round.
    ``client_hosts`` collects the machines (Ray nodes) the clients trained on.
    """

    def __init__(self, node_to_partition: dict[int, int], seed: int, fraction: float) -> None:
        """Train the nodes of ``node_to_partition``; ``seed``/``fraction`` drive the selection."""
        super().__init__(fraction_evaluate=0.0, min_available_nodes=len(node_to_partition))
        self.node_to_partition = node_to_partition
        self.partition_to_node = {p: n for n, p in node_to_partition.items()}
        self.seed = seed
        self.fraction = fraction
        self.selected: dict[int, list[int]] = {}
        self.train_metrics: dict[int, dict[str, float]] = {}
        self.client_hosts: set[str] = set()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One train message to each selected partition's node."""
        selected = select_clients(len(self.node_to_partition), self.fraction, self.seed, server_round)
        self.selected[server_round] = selected
        config["server-round"] = server_round
        content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return [
            Message(content, dst_node_id=self.partition_to_node[p], message_type=MessageType.TRAIN)
            for p in selected
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check every selected client replied without error, then average in partition order."""
        replies = sorted(replies, key=lambda m: self.node_to_partition[m.metadata.src_node_id])
        for reply in replies:
            if reply.has_error():
                partition = self.node_to_partition[reply.metadata.src_node_id]
                raise RunFailed(f"round {server_round}: client {partition} failed: {_reason(reply)}")
        answered = [self.node_to_partition[m.metadata.src_node_id] for m in replies]
        if answered != self.selected[server_round]:
            missing = sorted(set(self.selected[server_round]) - set(answered))
            raise RunFailed(f"round {server_round}: no reply from clients {missing} in time")
        self.client_hosts.update(str(m.content[HOST_KEY]["hostname"]) for m in replies)
        arrays, metrics = super().aggregate_train(server_round, replies)
        self.train_metrics[server_round] = {k: float(v) for k, v in (metrics or {}).items()}
        return arrays, metrics
