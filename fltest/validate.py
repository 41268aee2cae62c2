"""What can be checked before anything runs: the config file, and the data it names (read once)."""

from __future__ import annotations

from pathlib import Path

from fltest.config.loader import load_config, naming_the_file
from fltest.config.privacy import ExcludedParameters
from fltest.config.runs import run_kind
from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import cached_shards
from fltest.errors import FieldError
from fltest.model.numpy_mlp import NumpyMLP
from fltest.privacy.sharing import check_withheld


def check_config(path: str | Path, reuse_shards: bool = False) -> ExperimentConfig:
    """The config at ``path``, loaded, with its data's columns and split checked (a ``hub`` source: at run time), and
    the built-in model's parameters that ``training.privacy`` withholds (a user's model: when it is built).

    With ``reuse_shards``, a config whose shard set this machine's cache already holds is not read
    again: its data was checked when the set was prepared, and the run will reuse it (``fltest-flower
    run``, whose operator shares this user's cache). Raises :class:`fltest.errors.InputError` naming
    the file and field; ``fltest validate``, ``fltest-deploy run`` and ``fltest-flower run`` call it
    before anything is started.
    """
    config = load_config(path)
    with naming_the_file(path):
        withheld = config.training.privacy
        if isinstance(withheld, ExcludedParameters) and config.model.module is None:  # a user's model: at run time
            check_withheld(withheld, NumpyMLP(config.model.hidden).init_params((1,), 2, config.seed))  # its layout
        if not (reuse_shards and cached_shards(config) is not None):
            from fltest.data.split import check_local_data  # the datasets library: 0.7 s, only when the data is read

            check_local_data(config)
    return config


def gpus_asked(config: ExperimentConfig) -> float:
    """The GPUs the config's runs ask of a Ray cluster: ``total_gpus`` when a Flower simulation run is among
    them, else 0 (the reference, NVFlare's simulator and Flower's SuperNodes ask Ray for none)."""
    return config.total_gpus if any(run_kind(run) == "flwr-simulation" for run in config.runs) else 0.0


def check_cluster_gpus(config: ExperimentConfig, node_gpus: list[float], cluster: str) -> None:
    """Refuse, in one line naming the field, a config whose runs ask ``cluster`` for more GPUs than it has.

    ``node_gpus``: the GPUs of each node Ray lists. Refused: ``total_gpus`` above their sum, and a client's
    share (``total_gpus / total_cpus``, what each Flower client asks Ray for) larger than any one node's
    GPUs, which Ray could place nowhere (the run would wait for it). Raises :class:`FieldError`;
    :func:`naming_the_file` puts the config file in front.
    """
    asked = gpus_asked(config)
    if not asked:
        return
    total, largest = sum(node_gpus), max(node_gpus, default=0.0)
    if asked > total:
        raise FieldError(f"total_gpus: {asked:g} GPU{'' if asked == 1 else 's'} asked, {cluster} has {total:g}")
    share = asked / config.total_cpus
    if share > largest:
        raise FieldError(
            f"total_gpus: each client asks total_gpus/total_cpus = {share:g} GPUs, "
            f"no node of {cluster} has that many (the most: {largest:g})"
        )
