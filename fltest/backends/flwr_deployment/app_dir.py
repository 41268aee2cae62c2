"""FLTest's Flower App directory: a ``pyproject.toml`` whose components are fltest's own apps.

The SuperLink and SuperNodes run the image's installed fltest (nothing is installed at run
time); the app directory carries only the run's settings, as run config.
"""

from __future__ import annotations

import json
from pathlib import Path

from fltest import __version__
from fltest.backends.flwr_deployment.app_components import CLASSES_KEY, EXPERIMENT_KEY, FEATURES_KEY, SHARDS_KEY
from fltest.backends.flwr_deployment.node_data import EXPORT_STORAGE
from fltest.config.schema import ExperimentConfig
from fltest.data.shards import ShardSet, cache_key

APPS_MODULE = "fltest.backends.flwr_deployment.app_components"

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
serverapp = "{module}:server_app"
clientapp = "{module}:client_app"

[tool.flwr.app.config]
{config}
"""


def write_app_dir(folder: Path, config: ExperimentConfig, shards: ShardSet) -> Path:
    """Write the app directory for ``config`` into ``folder``; returns ``folder``."""
    values = {
        EXPERIMENT_KEY: config.model_dump_json(),
        SHARDS_KEY: cache_key(config, EXPORT_STORAGE),  # what the nodes' exports carry, whatever ``shards`` is
        FEATURES_KEY: ",".join(map(str, shards.feature_shape)),
        CLASSES_KEY: shards.num_classes,
    }
    lines = "\n".join(f'"{key}" = {json.dumps(value)}' for key, value in values.items())
    folder.mkdir(parents=True, exist_ok=True)
    text = _TEMPLATE.format(version=__version__, experiment=config.name, module=APPS_MODULE, config=lines)
    (folder / "pyproject.toml").write_text(text)
    return folder
