"""A user's working folder, as tests that run ``fltest`` the way a user does lay it out (tests/test_user_folder.py,
tests/test_model_module.py): ``exp.yaml``, its hooks module and a ``save_to_disk`` dataset under ``data/``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, base_config

FLTEST = str(Path(sys.executable).with_name("fltest"))  # the console script, as a user types it


# The user's before_local_training replaces each client's data (its shard and the shard mirrored): every backend
# must train on what it returns, as the reference does, to give the reference's model.
REPLACING_HOOK = """

def before_local_training(partition_id, server_round, features, labels):
    \"\"\"Train on the shard and its mirror image.\"\"\"
    return np.concatenate([features, features[:, :, ::-1]]), np.concatenate([labels, labels])
"""


def user_folder(folder: Path, runs: list[dict]) -> Path:
    """A working folder as a user lays it out; returns the config's path (relative to ``folder``)."""
    import datasets
    from sklearn.datasets import load_digits

    digits = load_digits()
    datasets.Dataset.from_dict(
        {"pixels": digits.images.astype(np.uint8), "digit": digits.target.astype(np.int64)}
    ).save_to_disk(str(folder / "data"))
    (folder / "my_hooks.py").write_text((REPO / "examples" / "digits_hooks.py").read_text() + REPLACING_HOOK)
    config = base_config()
    config.update(
        name="user-folder",
        clients=4,
        hooks="my_hooks",
        runs=runs,
        dataset={"source": "disk", "path": "data", "features": ["pixels"], "label": "digit", "scale": 16.0},
    )
    config["training"].update(rounds=2, local_epochs=1)
    config.pop("output", None)  # the default: results/, relative to the working folder
    (folder / "exp.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return Path("exp.yaml")


def run_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``fltest <args>`` with ``folder`` as the working folder and a relative ``HF_HOME`` there."""
    env = {**os.environ, "HF_HOME": "hf-home", "HF_HUB_OFFLINE": "1"}
    env.pop("FLTEST_RAY_ADDRESS", None)
    return subprocess.run([FLTEST, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600)


REFERENCE = {"name": "reference", "framework": "reference"}
BACKENDS = [
    pytest.param({"name": "reference-again", "framework": "reference"}, id="reference"),
    pytest.param({"name": "flwr", "framework": "flwr"}, id="flwr", marks=pytest.mark.ray),
    pytest.param({"name": "nvflare", "framework": "nvflare"}, id="nvflare", marks=pytest.mark.nvflare),
]
