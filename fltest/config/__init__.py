"""The experiment config: its schema and how it is read from YAML."""

from fltest.config.loader import load_config
from fltest.config.schema import ExperimentConfig, RunConfig

__all__ = ["ExperimentConfig", "RunConfig", "load_config"]
