"""What FLTest's Flower App carries in its run config and bundle, written by the driver, read by the ServerApp and ClientApps.

The run config holds the experiment (as JSON), the shard set's key, and the initial model's
SHA-256; a simulation's also says where its clients find their shards. The initial model itself travels in the App's bundle as the module :data:`INITIAL_MODULE`
(Flower packs only source and text files into a FAB, at most 10 MB); a model too large for that is
made again by the ServerApp from the seed and checked against the digest.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import sys
from typing import TYPE_CHECKING

from fltest.config.schema import ExperimentConfig
from fltest.params import Params, params_from_bytes, params_to_bytes

if TYPE_CHECKING:  # the driver, which writes the run config, does not import Flower (0.7 s of its start)
    from flwr.app import Context

EXPERIMENT_KEY = "fltest-experiment"  # run-config keys
SHARDS_KEY = "fltest-shards-key"
FEATURES_KEY = "fltest-feature-shape"  # one sample's, e.g. "8,8"
CLASSES_KEY = "fltest-num-classes"
INITIAL_DIGEST_KEY = "fltest-initial-sha256"
# A simulation's own keys (a deployment's ClientApps read their node's data folder, its ServerApp pulls at the
# deployment's pace): where a client finds its shard (JSON, :mod:`fltest.backends.flwr.shard_sources`), how often
# the ServerApp pulls replies, and the Ray nodes' network names the driver noted (JSON ``{ip: name}``).
SHARD_SOURCE_KEY = "fltest-shard-source"
PULL_INTERVAL_KEY = "fltest-pull-interval-s"
NODE_NAMES_KEY = "fltest-ray-node-names"
INITIAL_MODULE = "fltest_initial_model"  # a module of the App's bundle: the initial model as base64 .npz
# The largest initial model shipped in the bundle, as base64 (Flower refuses a FAB over 10 MB, zipped;
# base64 of float64 weights zips to about 3/4 of its size): larger ones are made again by the ServerApp.
SHIPPED_MODEL_MAX_CHARS = 8 * 1024 * 1024


def experiment(context: Context) -> ExperimentConfig:
    """The experiment config carried by the run config (parsed once a process: a simulation's Ray actor answers many
    messages of one run)."""
    return _parsed_experiment(str(context.run_config[EXPERIMENT_KEY]))


@functools.lru_cache(maxsize=4)
def _parsed_experiment(text: str) -> ExperimentConfig:
    """``text`` as an experiment config (a frozen model: one copy serves every message)."""
    return ExperimentConfig.model_validate_json(text)


def params_digest(params: Params) -> str:
    """The SHA-256 of ``params`` as FLTest stores them (``.npz`` bytes)."""
    return hashlib.sha256(params_to_bytes(params)).hexdigest()


def initial_module_source(params: Params) -> str | None:
    """The text of :data:`INITIAL_MODULE` holding ``params``, or ``None`` when they are too large to ship."""
    encoded = base64.b64encode(params_to_bytes(params)).decode()
    if len(encoded) > SHIPPED_MODEL_MAX_CHARS:
        return None
    return f'"""The initial global model of an FLTest run, written by fltest for its ServerApp."""\n\nNPZ_BASE64 = "{encoded}"\n'


def shipped_initial_params() -> Params | None:
    """The initial model shipped in the App's bundle, or ``None`` when it was too large to ship."""
    try:
        module = importlib.import_module(INITIAL_MODULE)
    except ModuleNotFoundError:
        return None
    try:
        return params_from_bytes(base64.b64decode(module.NPZ_BASE64))
    finally:
        sys.modules.pop(INITIAL_MODULE, None)  # a later run's bundle carries its own
