"""The ServerApp and ClientApp of FLTest's Flower App (the app directory's components).

Both read the experiment from the run config (:mod:`fltest.backends.flwr_deployment.app_dir`
writes it). The ClientApp reads its partition from the folder its SuperNode's node config
names (``data-path``); the ServerApp trains with Flower's class for the strategy, as the simulation
does, and reports every round through the run's log.
"""

from __future__ import annotations

import socket
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fltest.backends.flwr.client_app import HOST_KEY, make_client_app, params_to_record, record_to_params
from fltest.backends.flwr.strategy import discover_partitions, flower_strategy
from fltest.backends.flwr.time_limit import REPLY_GRACE_S
from fltest.backends.flwr_deployment import channel
from fltest.backends.flwr_deployment.node_data import DATA_PATH_KEY, NodeShard
from fltest.config.schema import ExperimentConfig
from fltest.errors import FLTestError
from fltest.model import initial_params, load_model
from fltest.rounds import RoundResult

EXPERIMENT_KEY = "fltest-experiment"  # run-config keys
SHARDS_KEY = "fltest-shards-key"
FEATURES_KEY = "fltest-feature-shape"  # one sample's, e.g. "8,8"
CLASSES_KEY = "fltest-num-classes"

server_app = ServerApp()
client_app = ClientApp()


def experiment(context: Context) -> ExperimentConfig:
    """The experiment config carried by the run config."""
    return ExperimentConfig.model_validate_json(str(context.run_config[EXPERIMENT_KEY]))


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """Discover the partitions, run Flower's strategy, report each round; a failure is reported, then raised."""
    config = experiment(context)
    try:
        timeout = config.training.round_timeout_s
        hosts: dict[int, str] = {}
        mapping = discover_partitions(grid, config.clients, timeout, hosts)
        names = {node: f"SuperNode {host}" for node, host in hosts.items()}
        strategy = flower_strategy(config.training.strategy, mapping, config.seed, config.training.fraction_fit, names)
        feature_shape = tuple(int(n) for n in str(context.run_config[FEATURES_KEY]).split(","))
        initial = initial_params(load_model(config.model), feature_shape, int(context.run_config[CLASSES_KEY]), config.seed)

        def report(server_round: int, arrays) -> None:
            if server_round > 0:
                channel.emit_round(RoundResult(
                    server_round, record_to_params(arrays), strategy.train_metrics[server_round], strategy.selected[server_round]
                ))  # fmt: skip

        strategy.start(grid=grid, initial_arrays=params_to_record(initial), num_rounds=config.training.rounds,
                       timeout=timeout + REPLY_GRACE_S, train_config=ConfigRecord(), evaluate_fn=report)  # fmt: skip
    except FLTestError as exc:
        channel.emit_error(str(exc))
        raise
    except Exception as exc:
        channel.emit_error(f"{type(exc).__name__}: {exc}")
        raise
    channel.emit_done(sorted(strategy.client_hosts))


def _node_app(context: Context) -> ClientApp:
    """FLTest's ClientApp reading this node's own partition folder."""
    config = experiment(context)
    shard = NodeShard(Path(str(context.node_config[DATA_PATH_KEY])), str(context.run_config[SHARDS_KEY]), config.clients)
    return make_client_app(config, shard)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer the partition query with the SuperNode's hostname (the node's data folder is checked first)."""
    reply = _node_app(context)(msg, context)
    if reply.has_error() or HOST_KEY in reply.content:
        return reply
    content = RecordDict({**dict(reply.content.items()), HOST_KEY: ConfigRecord({"hostname": socket.gethostname()})})
    return Message(content, reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Train on this node's partition."""
    return _node_app(context)(msg, context)
