"""Choosing a flwr run's backend by its ``mode``, and the deployment mode's input checks (no SuperLink needed)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from flwr.app import Context, RecordDict

from fltest.backends.flwr.backend import FlwrBackend
from fltest.backends.flwr_deployment import run_config, server_component
from fltest.backends.flwr_deployment.backend import FlwrDeploymentBackend
from fltest.backends.flwr_deployment.run_config import (
    CLASSES_KEY,
    EXPERIMENT_KEY,
    FEATURES_KEY,
    INITIAL_DIGEST_KEY,
    initial_module_source,
    params_digest,
)
from fltest.backends.registry import backend_for
from fltest.cli import main
from fltest.config.schema import ExperimentConfig
from fltest.errors import RunFailed
from fltest.model import initial_params, load_model
from tests.conftest import base_config


def _run(options: dict | None = None):
    """A flwr run named ``a`` with ``options``, validated as a config's run is."""
    config = base_config()
    config["runs"] = [{"name": "a", "framework": "flwr", **({"options": options} if options is not None else {})}]
    return ExperimentConfig.model_validate(config).runs[0]


def test_mode_selects_the_backend():
    assert type(backend_for(_run())) is FlwrBackend
    assert type(backend_for(_run({"mode": "simulation"}))) is FlwrBackend
    deployment = {"mode": "deployment", "superlink": "h:1", "root_certificates": "ca.crt"}
    assert type(backend_for(_run(deployment))) is FlwrDeploymentBackend


@dataclass(frozen=True)
class Outcome:
    """What ``fltest validate`` returned and wrote."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def validate(write_config, tmp_path, capsys, monkeypatch):
    """``validate(options, hooks)``: ``fltest validate`` of a config whose one run is flwr with ``options``.

    In this process (the CLI's own subprocess path is tested in test_config.py): a fresh
    interpreter importing fltest for each case cost seconds apiece.
    """
    monkeypatch.chdir(tmp_path)

    def run(options: dict, hooks: bool = False) -> Outcome:
        config = base_config()
        if not hooks:
            config.pop("hooks")
        config["runs"] = [{"name": "flower", "framework": "flwr", "options": options}]
        path = write_config(config)
        capsys.readouterr()
        code = main(["validate", str(path)])
        written = capsys.readouterr()
        return Outcome(code, written.out, written.err)

    return run


@pytest.fixture
def ca_file(tmp_path):
    path = tmp_path / "ca.crt"
    path.write_text("not checked before the run\n")
    return path


@pytest.mark.parametrize("hooks", [False, True], ids=["no-hooks", "hooks"])
def test_a_deployment_run_with_its_superlink_and_ca_is_valid(validate, ca_file, hooks):
    result = validate({"mode": "deployment", "superlink": "10.0.0.1:8000", "root_certificates": str(ca_file)}, hooks)
    assert result.returncode == 0, result.stderr  # hooks too: the Flower App carries them (tests/test_model_module.py)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"mode": "swarm"}, "runs.flower.options.mode: 'swarm': expected 'simulation' or 'deployment'"),
        (
            {"mode": "deployment", "root_certificates": "CA"},
            "runs.flower.options.superlink: required with mode deployment",
        ),
        (
            {"mode": "deployment", "superlink": "no port", "root_certificates": "CA"},
            "runs.flower.options.superlink: 'no port'",
        ),
        ({"mode": "deployment", "superlink": "h:1"}, "runs.flower.options.root_certificates: required"),
        ({"mode": "deployment", "superlink": "h:1", "root_certificates": "missing.crt"}, "missing.crt: no such file"),
        (
            {"mode": "simulation", "superlink": "h:1"},
            "runs.flower.options.superlink: unknown option for flwr (known: mode)",
        ),
    ],
)
def test_bad_flwr_options_are_one_line_naming_the_file_and_exit_2(validate, ca_file, tmp_path, options, message):
    options = {k: (str(ca_file) if v == "CA" else v) for k, v in options.items()}
    result = validate(options)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fltest: error: {tmp_path / 'config.yaml'}: "), lines
    assert message in lines[0], lines


def _server_context(config: ExperimentConfig, digest: str) -> Context:
    """The Context FLTest's ServerApp gets on a SuperLink, for ``config`` on the digits (8x8, 10 classes)."""
    run_config = {
        EXPERIMENT_KEY: config.model_dump_json(),
        FEATURES_KEY: "8,8",
        CLASSES_KEY: 10,
        INITIAL_DIGEST_KEY: digest,
    }
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)


def test_the_initial_model_travels_in_the_bundle_and_one_too_large_is_made_again_and_checked(monkeypatch):
    """The deployment's ServerApp starts from the driver's model: shipped, or, too large to ship, made again and checked."""
    config = ExperimentConfig.model_validate(base_config() | {"hooks": None})
    model = load_model(config.model)
    initial = initial_params(model, (8, 8), 10, config.seed)
    assert initial_module_source(initial) is not None  # the digits' model is shipped
    monkeypatch.setattr(run_config, "SHIPPED_MODEL_MAX_CHARS", 100)
    assert initial_module_source(initial) is None  # ... but not a model over the limit
    assert server_component.shipped_initial_params() is None  # no bundle module on this path
    made = server_component._initial(_server_context(config, params_digest(initial)))
    assert all((a == b).all() for a, b in zip(made, initial))
    with pytest.raises(RunFailed, match="initial model, made again from the seed, is not the driver's"):
        server_component._initial(_server_context(config, "0" * 64))
