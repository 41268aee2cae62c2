"""The ClientApp of FLTest's Flower App: FLTest's client, reading this SuperNode's own partition.

The SuperNode starts one ``flwr-clientapp`` process per message, which imports this module each
time: it imports what a client needs only.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fltest.backends.flwr.client_app import make_client_app
from fltest.backends.flwr_deployment.node_shard import DATA_PATH_KEY, NodeShard
from fltest.backends.flwr_deployment.run_config import SHARDS_KEY, experiment

client_app = ClientApp()


def _node_app(context: Context) -> ClientApp:
    """FLTest's ClientApp reading this node's own partition folder."""
    config = experiment(context)
    shard = NodeShard(
        Path(str(context.node_config[DATA_PATH_KEY])), str(context.run_config[SHARDS_KEY]), config.clients
    )
    return make_client_app(config, shard)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer the partition query (the node's data folder is checked first)."""
    return _node_app(context)(msg, context)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Train on this node's partition."""
    return _node_app(context)(msg, context)
