"""What can be checked before anything runs: the config file, and the data it names (read once)."""

from __future__ import annotations

from pathlib import Path

from fltest.config.loader import load_config, naming_the_file
from fltest.config.schema import ExperimentConfig
from fltest.data.split import check_local_data


def check_config(path: str | Path) -> ExperimentConfig:
    """The config at ``path``, loaded, with its data's columns and split checked (a ``hub`` source: at run time).

    Raises :class:`fltest.errors.InputError` naming the file and field; ``fltest validate``,
    ``fltest-deploy run`` and ``fltest-flower run`` call it before anything is started.
    """
    config = load_config(path)
    with naming_the_file(path):
        check_local_data(config)
    return config
