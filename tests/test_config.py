"""Config validation: every bad input is one line naming the field, exit code 2, no output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fltest.config import load_config
from fltest.errors import InputError
from fltest.validate import check_config
from tests.conftest import REPO, base_config


def _set(data: dict, dotted: str, value) -> dict:
    node = data
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return data


_DELETE = object()

BAD = [
    ("unknown key", "training.epochs", 3, "training.epochs: unknown key"),
    ("wrong type", "training.rounds", "five", "training.rounds"),
    ("zero rounds", "training.rounds", 0, "training.rounds"),
    ("alpha <= 0", "partition.alpha", 0.0, "partition.alpha"),
    ("missing field", "training.rounds", _DELETE, "training.rounds: Field required"),
    ("bad framework", "runs", [{"name": "x", "framework": "tensorflow"}], "runs.0.framework"),
    ("no runs", "runs", [], "runs"),
    ("both budgets", "training.local_steps", 5, "training.local_epochs/local_steps"),
    ("hub without name", "dataset.source", "hub", "dataset.name"),
    ("fraction above 1", "training.fraction_fit", 1.5, "training.fraction_fit"),
    ("missing disk folder", "dataset", {"source": "disk", "path": "nowhere"}, "dataset.path: folder not found"),
    (
        "hooks not importable",
        "hooks",
        "no_such_hooks_module",
        "hooks: no module 'no_such_hooks_module' beside the config or on sys.path",
    ),
    ("mlp without layers", "model", {"type": "mlp"}, "model.hidden"),
    (
        "digits feature column missing",
        "dataset.features",
        ["img"],
        "dataset.features: column 'img' not in the dataset (columns: image, label)",
    ),
    ("digits label column missing", "dataset.label", "target", "dataset.label: column 'target' not in the dataset"),
    (
        "dirichlet that cannot be drawn",
        "partition",
        {"method": "dirichlet", "alpha": 0.01, "min_samples_per_client": 100},
        "partition.alpha: Dirichlet(0.01) left a client with fewer than 100 samples",
    ),
    (
        "label shards that cannot be drawn",
        "partition",
        {"method": "shards", "shards_per_client": 200},
        "partition.shards_per_client: 2000 shards need at least as many training samples, there are 1438",
    ),
    ("bad run name", "runs", [{"name": "a/b", "framework": "reference"}], "runs.0.name"),
    ("a revision outside the hub", "dataset.revision", "main", "name/revision: only for source 'hub'"),
    ("a hub name outside the hub", "dataset.name", "ylecun/mnist", "name/revision: only for source 'hub'"),
    ("a path outside disk", "dataset.path", "data", "path: only for source 'disk'"),
]


@pytest.mark.parametrize(("case", "field", "value", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_the_field(write_config, case, field, value, expected):
    path = write_config(_set(base_config(), field, value))
    with pytest.raises(InputError) as error:
        check_config(path)  # the loader's checks, then the data's (columns, the split)
    message = str(error.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_the_loader_reads_no_data_and_the_check_reads_it(write_config, tmp_path):
    """``load_config`` parses and validates; the data it names is read by the data code (``check_config``, a run)."""
    (tmp_path / "empty").mkdir()  # a folder, but no save_to_disk folder: only reading it tells
    data = base_config()
    data["dataset"] = {"source": "disk", "path": "empty", "features": ["image"], "label": "label"}
    path = write_config(data)
    assert load_config(path).dataset.path == tmp_path / "empty"
    with pytest.raises(InputError, match=rf"^{path}: dataset.path: not a save_to_disk folder: {tmp_path / 'empty'}"):
        check_config(path)


def test_duplicate_run_names_are_refused(write_config):
    data = base_config()
    data["runs"] = [{"name": "a", "framework": "reference"}, {"name": "a", "framework": "reference"}]
    with pytest.raises(InputError, match="runs: duplicate run name 'a'"):
        load_config(write_config(data))


def test_missing_config_file(tmp_path):
    with pytest.raises(InputError, match="config file not found"):
        load_config(tmp_path / "absent.yaml")


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nseed: [1,\n")
    with pytest.raises(InputError, match=r"not valid YAML \(line \d+\)"):
        load_config(path)


def test_valid_example_loads_with_its_defaults():
    config = load_config("examples/digits.yaml")
    assert config.clients == 10
    assert config.partition.method == "dirichlet"
    assert config.output.save_round_models is False


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fltest.cli", *args], cwd=cwd, capture_output=True, text=True)


def test_cli_bad_config_exit_2_one_line_no_output(write_config, tmp_path):
    data = base_config()
    data["clients"] = 5000  # more clients than the 1,438 training samples
    path = write_config(data)
    for command in ("validate", "run"):
        result = _cli(command, str(path), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()  # one line: no traceback above it
        assert line.startswith("fltest: error:")
        assert "clients: 5000 clients but only 1438 training samples" in line
        assert str(path) in line
    assert not (tmp_path / "results").exists()


def test_cli_validate_ok(tmp_path):
    result = _cli("validate", "examples/digits.yaml", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout == "examples/digits.yaml: valid (3 runs, 10 clients, 5 rounds)\n"
    )  # the whole line: "valid" is in "invalid" too
