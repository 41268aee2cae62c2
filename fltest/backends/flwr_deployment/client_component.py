"""The ClientApp of FLTest's Flower App: FLTest's client, reading its shard where the run config says.

In a deployment the client reads its SuperNode's own partition folder; in a simulation, the shard
source the driver named in the run config (:mod:`fltest.backends.flwr.shard_sources`). A SuperNode
starts one ``flwr-clientapp`` process per message, which imports this module each time: it imports
what a client needs only.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fltest.backends.flwr.client_app import ShardSource, make_client_app
from fltest.backends.flwr.shard_sources import shard_source
from fltest.backends.flwr_deployment.node_shard import DATA_PATH_KEY, NodeShard
from fltest.backends.flwr_deployment.run_config import SHARD_SOURCE_KEY, SHARDS_KEY, experiment

client_app = ClientApp()


def _node_app(context: Context) -> ClientApp:
    """FLTest's ClientApp reading the simulation's shard source, or this node's own partition folder."""
    config = experiment(context)
    source: ShardSource
    if SHARD_SOURCE_KEY in context.run_config:
        source = shard_source(str(context.run_config[SHARD_SOURCE_KEY]))
    else:
        source = NodeShard(
            Path(str(context.node_config[DATA_PATH_KEY])), str(context.run_config[SHARDS_KEY]), config.clients
        )
    return make_client_app(config, source)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer the partition query (a deployment node's data folder is checked first)."""
    return _node_app(context)(msg, context)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Train on this client's partition."""
    return _node_app(context)(msg, context)
