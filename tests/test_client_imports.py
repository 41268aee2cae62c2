"""The processes that train on one shard import what a client needs only.

A Flower 1.42 SuperNode starts one ``flwr-clientapp`` process per message, which imports the
module the App's pyproject names as its clientapp: whatever that module pulls in is paid again by
every client in every round. NVFlare's simulator starts a process a client, which runs FLTest's
Client API script: its imports are paid by every client before round 1. Ray and ``flwr.simulation`` (a
simulation's runtime, which has them already), ``datasets`` (the driver
prepares shards with it; a client reads its own with pyarrow), matplotlib and pandas (plots and
reports) must stay out.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fltest.backends.flwr_deployment.app_dir import CLIENT_COMPONENT
from fltest.config.schema import ExperimentConfig
from fltest.data.shard_cache import prepare_shards
from tests.conftest import REPO, base_config

FORBIDDEN = ("ray", "flwr.simulation", "datasets", "matplotlib", "pandas")


def imported_by(module: str, then: str = "pass") -> set[str]:
    """The modules a fresh interpreter holds after ``import module`` and the statement ``then``."""
    code = f"import json, sys; import {module}; {then}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.fixture(scope="module")
def client_modules() -> set[str]:
    """What importing the App's clientapp module brings in."""
    return imported_by(CLIENT_COMPONENT.split(":")[0])


@pytest.mark.parametrize("package", FORBIDDEN)
def test_the_client_app_module_does_not_import(client_modules, package):
    pulled = sorted(m for m in client_modules if m == package or m.startswith(package + "."))
    assert not pulled, f"{CLIENT_COMPONENT} imports {package}: {pulled[:5]}"


@pytest.mark.nvflare
@pytest.mark.parametrize("package", FORBIDDEN)
def test_the_nvflare_client_script_does_not_import(package):
    from fltest.backends.nvflare import job

    script = job.client.__name__  # the module whose file the job's ScriptRunner names
    pulled = sorted(m for m in imported_by(script) if m == package or m.startswith(package + "."))
    assert not pulled, f"{script} imports {package}: {pulled[:5]}"


def test_a_client_reading_its_shard_imports_neither_pandas_nor_datasets(fresh_cache):
    """Reading a shard is part of a client's timed local training, in every process that trains.

    pyarrow's ``to_numpy`` imports pandas on its first call in a process: 0.2 s on an idle machine,
    several on a busy one, inside ``round_timeout_s`` of round 1.
    """
    from fltest.backends.flwr.shard_sources import cache_spec

    config = ExperimentConfig.model_validate(base_config())
    shards, _ = prepare_shards(config)
    read = f"x, y = shard_source({cache_spec(shards)!r})(0)"  # as a simulated client reads it, named in the run config
    module = "fltest.backends.flwr.shard_sources"
    pulled = sorted(
        m for m in imported_by(module, f"from {module} import shard_source; {read}") if m.partition(".")[0] in FORBIDDEN
    )
    assert not pulled, f"reading a shard imports {pulled[:5]}"


def test_the_check_sees_what_a_module_imports():
    """The same check on the driver's modules finds what they import: the subprocess reports real imports."""
    assert {"datasets", "pandas"} <= imported_by("fltest.data.shards")
    assert {"ray"} <= imported_by("fltest.backends.flwr.cluster")
