"""The ServerApp of FLTest's Flower App: the shared server loop, reporting through the run's log.

It runs in the SuperLink's ServerApp process (``flwr-serverapp``; a simulation's ``flwr-simulation``,
beside Flower's Ray backend), starts from the initial model
the driver shipped in the App's bundle (or, for a model too large to ship, makes it again from the
seed and checks it against the driver's digest), and reports each round as a line of the run's
log (:mod:`fltest.backends.flwr_deployment.channel`).
"""

from __future__ import annotations

import json

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fltest.backends.flwr.pulling_grid import DEPLOYMENT_PULL_INTERVAL_S, PullingGrid
from fltest.backends.flwr.ray_errors import note_node_names
from fltest.backends.flwr.server_loop import serve_rounds
from fltest.backends.flwr_deployment import channel
from fltest.backends.flwr_deployment.run_config import (
    CLASSES_KEY,
    FEATURES_KEY,
    INITIAL_DIGEST_KEY,
    NODE_NAMES_KEY,
    PULL_INTERVAL_KEY,
    experiment,
    params_digest,
    shipped_initial_params,
)
from fltest.errors import RunFailed
from fltest.model import initial_params, load_model
from fltest.params import Params

server_app = ServerApp()


def _initial(context: Context) -> Params:
    """The driver's initial model: shipped, or made again from the seed and checked against the driver's digest."""
    shipped = shipped_initial_params()
    if shipped is not None:
        return shipped
    config = experiment(context)
    feature_shape = tuple(int(n) for n in str(context.run_config[FEATURES_KEY]).split(","))
    made = initial_params(load_model(config.model), feature_shape, int(context.run_config[CLASSES_KEY]), config.seed)
    if params_digest(made) != str(context.run_config[INITIAL_DIGEST_KEY]):
        raise RunFailed(
            "the ServerApp's initial model, made again from the seed, is not the driver's: "
            "the model's init_params differs between machines"
        )
    return made


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """Run the experiment's rounds on the SuperNodes, reporting each in the run's log."""
    try:
        initial = _initial(context)
    except Exception as exc:
        channel.LogSink().failed(str(exc) if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}")
        raise
    simulated = PULL_INTERVAL_KEY in context.run_config
    if NODE_NAMES_KEY in context.run_config:  # a simulation on a cluster: a lost node is named as the driver knew it
        note_node_names(json.loads(str(context.run_config[NODE_NAMES_KEY])))
    pull_interval_s = float(context.run_config[PULL_INTERVAL_KEY]) if simulated else DEPLOYMENT_PULL_INTERVAL_S
    grid = PullingGrid(grid, pull_interval_s)  # a round ends soon after its last reply, not at Flower's next pull
    serve_rounds(grid, experiment(context), initial, channel.LogSink(), node_label=None if simulated else "SuperNode")
