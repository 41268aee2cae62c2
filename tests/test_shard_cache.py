"""A run whose shard set is cached finds it without the datasets library, in the folder that library uses.

Importing ``datasets`` was 0.7 s of every run's start before its framework ran (issue 31): finding a
cached set now reads the same environment variables the library reads, and these tests hold the two
to the same folder and keep the library out of a cached run's driver until its framework starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import prepare_shards
from tests.conftest import REPO, base_config

CACHE_VARIABLES = ("HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME")
# Each case: the variables set (others unset); a relative or ~ path is taken as a user's shell would leave it.
CASES = [
    {},
    {"HF_HOME": "/srv/hf"},
    {"HF_HOME": "relative-hf"},
    {"HF_HOME": "~/elsewhere"},
    {"XDG_CACHE_HOME": "/srv/xdg"},
    {"XDG_CACHE_HOME": "/srv/xdg", "HF_HOME": "/srv/hf"},
    {"HF_DATASETS_CACHE": "/srv/datasets", "HF_HOME": "/srv/hf"},
    {"HF_DATASETS_CACHE": "relative-datasets"},
]


def _python(code: str, env: dict[str, str], cwd: Path) -> list:
    """Run ``code`` in a fresh interpreter with ``env``; the JSON its last line prints."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("variables", CASES, ids=lambda case: ",".join(f"{k}={v}" for k, v in case.items()) or "none")
def test_the_cache_folder_is_the_one_the_datasets_library_uses(variables, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES} | variables
    code = (
        "import json; from pathlib import Path; from fltest.data.shard_cache import cache_root; ours = cache_root(); "
        "import datasets.config; theirs = Path(datasets.config.HF_DATASETS_CACHE).absolute() / 'fltest-shards'; "
        "print(json.dumps([str(ours), str(theirs)]))"
    )
    ours, theirs = _python(code, env, tmp_path)
    assert ours == theirs


def test_a_cached_run_reaches_its_framework_without_the_datasets_library(fresh_cache, write_config, tmp_path):
    """The runner's shard lookup, the check ``fltest-flower run`` makes and the Flower simulation's backend."""
    config = base_config()
    prepare_shards(ExperimentConfig.model_validate(config))
    write_config(config)
    code = (
        "import json, sys; from fltest.runner import prepare; "
        "from fltest.validate import check_config; import fltest.backends.flwr.backend; "
        "config = check_config('config.yaml', reuse_shards=True); shards = prepare(config); "
        "print(json.dumps([shards.num_clients, sorted(m for m in sys.modules if m.partition('.')[0] == 'datasets')]))"
    )
    clients, imported = _python(code, dict(os.environ), tmp_path)  # fresh_cache's folder, in the environment
    assert clients == config["clients"]
    assert imported == []
