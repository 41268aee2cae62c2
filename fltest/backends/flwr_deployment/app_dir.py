"""FLTest's Flower App directory: a ``pyproject.toml`` whose components are fltest's own apps, and the user's modules.

The SuperLink and SuperNodes run the image's installed fltest (nothing is installed at run
time); the app directory carries the run's settings, as run config
(:mod:`fltest.backends.flwr_deployment.run_config`), the initial model, and the source of the
config's hooks and model modules (a file or a package folder each), which Flower packs into the
app's bundle (FAB) and puts on ``sys.path`` where the ServerApp and the ClientApps run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fltest import __version__
from fltest.backends.flwr_deployment.node_data import EXPORT_STORAGE
from fltest.backends.flwr_deployment.run_config import (
    CLASSES_KEY,
    EXPERIMENT_KEY,
    FEATURES_KEY,
    INITIAL_DIGEST_KEY,
    INITIAL_MODULE,
    SHARDS_KEY,
    initial_module_source,
    params_digest,
)
from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import cache_key
from fltest.data.shard_set import ShardSet
from fltest.params import Params
from fltest.user_module import module_source

SERVER_COMPONENT = "fltest.backends.flwr_deployment.server_component:server_app"
CLIENT_COMPONENT = "fltest.backends.flwr_deployment.client_component:client_app"

_TEMPLATE = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "fltest-app"
version = "{version}"
description = "FLTest experiment {experiment} as a Flower App"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "fltest"

[tool.flwr.app.components]
serverapp = "{server}"
clientapp = "{client}"

[tool.flwr.app.config]
{config}
"""


def user_module_sources(config: ExperimentConfig) -> list[Path]:
    """The source files or package folders of the config's hooks and model modules, which the app carries.

    Raises :class:`~fltest.errors.InputError` naming the field for a module that is not Python source.
    """
    named = {"hooks": config.hooks, "model.module": config.model.module}
    return list(dict.fromkeys(module_source(field, name) for field, name in named.items() if name))


def write_app_dir(
    folder: Path,
    config: ExperimentConfig,
    shards: ShardSet,
    initial: Params,
    extra: dict[str, str | int | float] | None = None,
) -> Path:
    """Write the app directory for ``config`` into ``folder``: its ``pyproject.toml``, the initial model ``initial``
    (:data:`~fltest.backends.flwr_deployment.run_config.INITIAL_MODULE`, when it fits in a bundle) and the user's
    modules beside it; ``extra`` run-config values join the common ones (a simulation's); returns ``folder``."""
    values = {
        **(extra or {}),
        EXPERIMENT_KEY: config.model_dump_json(),
        SHARDS_KEY: cache_key(config, EXPORT_STORAGE),  # what the nodes' exports carry, whatever ``shards`` is
        FEATURES_KEY: ",".join(map(str, shards.feature_shape)),
        CLASSES_KEY: shards.num_classes,
        INITIAL_DIGEST_KEY: params_digest(initial),
    }
    lines = "\n".join(f'"{key}" = {json.dumps(value)}' for key, value in values.items())
    folder.mkdir(parents=True, exist_ok=True)
    text = _TEMPLATE.format(
        version=__version__, experiment=config.name, server=SERVER_COMPONENT, client=CLIENT_COMPONENT, config=lines
    )
    (folder / "pyproject.toml").write_text(text)
    shipped = initial_module_source(initial)
    if shipped is not None:
        (folder / f"{INITIAL_MODULE}.py").write_text(shipped)
    for source in user_module_sources(config):
        if source.is_dir():
            shutil.copytree(source, folder / source.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, folder / source.name)
    return folder
