"""The ``fltest`` command as a user runs it: from the folder that holds the config, with relative paths.

The working folder holds ``exp.yaml``, its hooks module and a ``save_to_disk`` dataset under
``data/``; the config names them by relative paths, ``output.dir`` is left at its default
(``results``) and even ``HF_HOME`` is relative. Every backend must then see the same files,
although the NVFlare simulator and Ray workers run in processes (and folders) of their own.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.user_folder import BACKENDS, REFERENCE, run_in, user_folder

TOLERANCE = 1e-9


@pytest.mark.parametrize("run", BACKENDS)
def test_run_from_the_config_folder_with_relative_paths(tmp_path, run):
    config = user_folder(tmp_path, [REFERENCE, run])
    result = run_in(tmp_path, "run", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    experiment = tmp_path / "results" / "user-folder"  # the default output folder, under the working folder
    summary = json.loads((experiment / run["name"] / "summary.json").read_text())
    assert summary["status"] == "completed", summary["error"]
    assert summary["rounds_completed"] == 2
    assert "macro_f1" in summary["final"]  # the hooks module beside the config was imported
    comparison = json.loads((experiment / "comparison.json").read_text())
    row = next(r for r in comparison["runs"] if r["run"] == run["name"])
    assert row["max_param_diff_vs_reference"] <= TOLERANCE
    assert (tmp_path / "hf-home" / "datasets" / "fltest-shards").is_dir()  # the relative HF_HOME, resolved here
    if run["framework"] == "nvflare":  # its job and the simulator's workspace: in the run's folder, removed after
        assert (experiment / run["name"] / "simulator.log").is_file()
        assert not (experiment / run["name"] / "nvflare").exists()


BROKEN_HOOKS = {
    "syntax error": (
        "def after_local_training(partition_id, server_round, old, new):\n    return {\n",
        2,
        "SyntaxError",
    ),
    "raises on import": ("import numpy\n\nTHRESHOLD = 1 / 0\n", 3, "ZeroDivisionError: division by zero"),
    "imports a missing package": (
        "import no_such_package_here\n",
        1,
        "ModuleNotFoundError: No module named 'no_such_package_here'",
    ),
    "exits on import": ("import sys\nsys.exit(3)\n", 2, "SystemExit: 3"),
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", sorted(BROKEN_HOOKS))
def test_hooks_that_fail_on_import_are_one_line_and_exit_2(tmp_path, command, case):
    body, line, error = BROKEN_HOOKS[case]
    config = user_folder(tmp_path, [REFERENCE])
    (tmp_path / "my_hooks.py").write_text(body)
    result = run_in(tmp_path, command, str(config))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback above it
    assert lines[0].startswith("fltest: error: exp.yaml: hooks: module 'my_hooks' failed to import: ")
    assert f"{tmp_path / 'my_hooks.py'}, line {line}: {error}" in lines[0]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_hooks_module_that_does_not_exist_is_one_line(tmp_path, command):
    config = user_folder(tmp_path, [REFERENCE])
    (tmp_path / "my_hooks.py").unlink()
    result = run_in(tmp_path, command, str(config))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fltest: error: exp.yaml: hooks: no module 'my_hooks' beside the config or on sys.path"
    )
    assert not (tmp_path / "results").exists()


DISK_COLUMN_PROBLEMS = {
    "missing feature column": (
        {"features": ["image"]},
        "dataset.features: column 'image' not in the dataset (columns: pixels, digit, score, name)",
    ),
    "missing label column": (
        {"label": "label"},
        "dataset.label: column 'label' not in the dataset (columns: pixels, digit, score, name)",
    ),
    "float labels": (
        {"label": "score"},
        "dataset.label: column 'score' holds Value('float64'), not integer class labels",
    ),
    "text features": ({"features": ["pixels", "name"]}, "dataset.features: column 'name' holds text, not numbers"),
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", sorted(DISK_COLUMN_PROBLEMS))
def test_the_columns_of_a_disk_dataset_are_checked_naming_the_file(tmp_path, case, command):
    import datasets

    change, expected = DISK_COLUMN_PROBLEMS[case]
    config_path = user_folder(tmp_path, [REFERENCE])
    data = datasets.load_from_disk(str(tmp_path / "data"))
    data = data.add_column("score", [0.5] * len(data)).add_column("name", ["x"] * len(data))
    data.save_to_disk(str(tmp_path / "data2"))
    config = yaml.safe_load((tmp_path / config_path).read_text())
    config["dataset"].update(path="data2", **change)
    (tmp_path / config_path).write_text(yaml.safe_dump(config))
    result = run_in(tmp_path, command, str(config_path))
    assert result.returncode == 2
    assert result.stderr.strip() == f"fltest: error: exp.yaml: {expected}"
    assert not (tmp_path / "results").exists()
    assert not list(
        (tmp_path / "hf-home").glob("datasets/fltest-shards/*")
    )  # no shard set, not even a half-written one


@pytest.mark.parametrize("command", ["run", "prepare"])
def test_a_split_that_cannot_be_drawn_is_one_line_naming_the_file(tmp_path, command):
    """The data is checked once, as the shards are prepared: one line naming file and field, nothing written."""
    config_path = user_folder(tmp_path, [REFERENCE])
    config = yaml.safe_load((tmp_path / config_path).read_text())
    config["partition"] = {
        "method": "dirichlet",
        "alpha": 0.01,
        "min_samples_per_client": 400,
    }  # 4 clients, 1,438 training rows
    (tmp_path / config_path).write_text(yaml.safe_dump(config))
    result = run_in(tmp_path, command, str(config_path))
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "fltest: error: exp.yaml: partition.alpha: Dirichlet(0.01) left a client with fewer than 400 samples"
    )
    assert not (tmp_path / "results").exists()
    assert not list((tmp_path / "hf-home").glob("datasets/fltest-shards/*"))


def test_results_dir_moves_the_results_root(tmp_path):
    """results.md: ``--results-dir`` overrides the root: ``<dir>/<experiment>/``, nothing in the default folder."""
    config = user_folder(tmp_path, [REFERENCE])
    result = run_in(tmp_path, "run", str(config), "--results-dir", "elsewhere/out")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "elsewhere" / "out" / "user-folder" / "reference" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert not (tmp_path / "results").exists()
