"""A ``hub`` dataset, loaded offline from the local Hugging Face cache as a user's earlier download left it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from tests.conftest import base_config

NAME = "fltest-test/tiny-digits"  # no such dataset on the hub: only the cache this test writes holds it
ROWS = 300


def _cache_a_hub_download(hf_home: Path) -> None:
    """Write ``NAME`` into ``hf_home``'s datasets cache as ``load_dataset`` leaves a hub download of it.

    The hub serves a dataset as Parquet files, which ``datasets`` prepares with its Parquet builder into
    ``<HF_HOME>/datasets/<org>___<name>/<config>/<version>/<commit>/``: offline, ``load_dataset``
    reads that folder back. The same builder writes it here, from a Parquet file of 300 digits.
    """
    import datasets
    from datasets.packaged_modules.parquet.parquet import Parquet
    from sklearn.datasets import load_digits

    digits = load_digits()
    source = datasets.Dataset.from_dict({"img": digits.images[:ROWS].astype(np.uint8), "label": digits.target[:ROWS]})
    parquet = hf_home / "download" / "train-00000-of-00001.parquet"
    parquet.parent.mkdir(parents=True)
    source.to_parquet(str(parquet))
    organisation, dataset = NAME.split("/")
    commit = "0123456789abcdef0123456789abcdef01234567"
    builder = Parquet(
        dataset_name=dataset, repo_id=NAME, data_files={"train": str(parquet)}, cache_dir=str(hf_home / "datasets")
    )
    builder.download_and_prepare(
        output_dir=str(hf_home / "datasets" / f"{organisation}___{dataset}" / "default" / "0.0.0" / commit)
    )


def test_a_hub_dataset_in_the_local_cache_is_loaded_offline_and_trained_on(tmp_path):
    hf_home = tmp_path / "hf"
    _cache_a_hub_download(hf_home)
    config = base_config()
    config.pop("hooks")
    config.update(
        name="hub-run",
        clients=3,
        dataset={"source": "hub", "name": NAME, "features": ["img"], "label": "label", "scale": 16.0},
        partition={"method": "iid"},
    )
    config["training"].update(rounds=2)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "fltest.cli", "run", "exp.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "prepared 3 mmap shards (240 samples, test 60)" in result.stderr
    )  # the cached dataset's 300 rows, 0.2 held out
    summary = json.loads((tmp_path / "results" / "hub-run" / "reference" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2, summary
