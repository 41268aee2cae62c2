"""FLTest's Flower ClientApp: answers a query with its partition id, trains on its own shard.

Both replies carry the partition id (an ``info`` record), so that a server that did not query
its clients learns from their first training replies which node holds which partition.

Local training that runs past ``round_timeout_s`` is answered with an error (see
:mod:`fltest.backends.flwr.time_limit`), so a hung client cannot keep the run alive. Both
answers name the client's host (the Ray node, or the SuperNode's container), which failure lines
and the summary's ``client_hosts`` give.

The app closes over a *shard source*, never over the shards themselves: Flower
pickles the app with every message, so it must stay small whatever the number of
clients.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, adaptiveclipping_mod, fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable

from fltest.backends.flwr.shard_sources import ShardSource
from fltest.backends.flwr.time_limit import call_within
from fltest.backends.supervision.deadlines import Deadlines
from fltest.config.privacy import AdaptiveClipping, LocalGaussian, NoisedAveraging, PrivacyConfig
from fltest.config.schema import ExperimentConfig
from fltest.fedavg import client_update, with_proximal_mu
from fltest.hooks import load_hooks
from fltest.params import Params, keyed, unkeyed
from fltest.privacy.local import local_noise_seed, sensitivity
from fltest.privacy.noise import global_generator_put_back

PARAMS_KEY = "arrays"
HOST_KEY = "host"  # a ConfigRecord naming the machine (Ray node) that trained
INFO_KEY = "info"  # a ConfigRecord with the client's partition id
PROXIMAL_MU_KEY = "proximal-mu"  # in the train config of Flower's FedProx
EQUAL_WEIGHT_KEY = "equal-weight"  # a private run's clients report the weight 1 (fltest.backends.flwr.privacy)


def params_to_record(params: Params) -> ArrayRecord:
    """Parameters as an ArrayRecord, keyed as :func:`fltest.params.keyed` keys them."""
    return ArrayRecord({key: Array(array) for key, array in keyed(params).items()})


def record_to_params(record: ArrayRecord) -> Params:
    """The inverse of :func:`params_to_record`."""
    return unkeyed({key: array.numpy() for key, array in record.items()})


def _host() -> ConfigRecord:
    """The record naming the machine this client runs on."""
    return ConfigRecord({"hostname": socket.gethostname()})


def _info(context: Context) -> ConfigRecord:
    """The record naming this client's partition."""
    return ConfigRecord({"partition-id": int(context.node_config["partition-id"])})


def partition_of(reply: Message) -> int:
    """The partition id a client's reply (query or train) names."""
    return int(reply.content[INFO_KEY]["partition-id"])


def _generator_put_back(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """A mod that puts numpy's global generator back as it was once the mods and app inside it are done."""
    with global_generator_put_back():
        return call_next(msg, context)


def generator_seeded_after(seed: int) -> Callable[[Message, Context, ClientAppCallable], Message]:
    """A mod that, once the app inside it has trained, seeds numpy's global generator for the client and the round
    as the reference seeds its noise (:func:`fltest.privacy.local.local_noise_seed`), for the mod outside it to
    draw from."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        server_round = int(msg.content["config"]["server-round"])
        np.random.seed(local_noise_seed(seed, server_round, int(context.node_config["partition-id"])))
        return reply

    return mod


def privacy_mods(privacy: PrivacyConfig | None, seed: int) -> list:
    """Flower's mods for ``privacy`` on a client: the one that clips where the clients clip (DP-FedAvg), or
    ``LocalDpMod`` (local DP), its noise drawn from the generator FLTest seeds once the client has trained (whatever
    the client's own code drew) and put back after; none otherwise."""
    if isinstance(privacy, LocalGaussian):
        local_dp = LocalDpMod(privacy.clipping_norm, sensitivity(privacy), privacy.epsilon, privacy.delta)
        return [_generator_put_back, local_dp, generator_seeded_after(seed)]
    if not isinstance(privacy, NoisedAveraging) or privacy.side == "server":
        return []
    return [adaptiveclipping_mod if isinstance(privacy, AdaptiveClipping) else fixedclipping_mod]


def make_client_app(config: ExperimentConfig, shard_source: ShardSource) -> ClientApp:
    """The ClientApp for ``config``, with Flower's clipping mod where its clients clip; ``shard_source(partition_id)``
    gives a client its shard."""
    app = ClientApp(mods=privacy_mods(config.training.privacy, config.seed))

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return Message(RecordDict({INFO_KEY: _info(context), HOST_KEY: _host()}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition_id = int(context.node_config["partition-id"])
        server_round = int(msg.content["config"]["server-round"])
        params = record_to_params(msg.content[PARAMS_KEY])
        mu = msg.content["config"].get(PROXIMAL_MU_KEY)  # Flower's FedProx sends its clients mu
        run_config = config if mu is None else with_proximal_mu(config, float(mu))

        def local_training():
            x, y = shard_source(partition_id)
            return client_update(run_config, load_hooks(config.hooks), partition_id, server_round, params, x, y)

        update = call_within(Deadlines.of(config).local_training_s, local_training)
        weight = {EQUAL_WEIGHT_KEY: 1} if isinstance(config.training.privacy, NoisedAveraging) else {}
        metrics = MetricRecord({"num-examples": update.num_examples, **weight, **update.metrics})
        content = RecordDict(
            {
                PARAMS_KEY: params_to_record(update.params),
                "metrics": metrics,
                HOST_KEY: _host(),
                INFO_KEY: _info(context),
            }
        )
        return Message(content, reply_to=msg)

    return app
