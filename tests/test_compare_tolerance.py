"""The experiment's tolerance (``compare.tolerance``): the table, comparison.json and the report say "identical",
"within <tolerance>" or the first round beyond it, and a run is called identical only when it is bit for bit."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fltest.backends.base import RunJob
from fltest.backends.reference import ReferenceBackend
from fltest.backends.registry import backend_for
from fltest.config.loader import load_config
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError
from fltest.results.compare import TOLERANCE, agreement
from fltest.results.report import draw_report
from fltest.results.table import format_table
from fltest.rounds import RoundResult
from fltest.runner import run_experiment
from tests.conftest import base_config

DRIFT = 1e-7  # what a GPU's kernels might add to each round's model: far below learning, far above 1e-9


class _Drifting:
    """A run's progress whose every reported model is off by ``DRIFT`` (as GPU training is from the CPU reference)."""

    def __init__(self, progress):
        self.progress = progress

    def setup_done(self):
        self.progress.setup_done()

    def round_done(self, result: RoundResult):
        params = [p + DRIFT * result.server_round for p in result.params]
        self.progress.round_done(RoundResult(result.server_round, params, result.train_metrics, result.clients))

    def note(self, **info):
        self.progress.note(**info)


class DriftingBackend(ReferenceBackend):
    """The reference, reporting models that drift from it by ``DRIFT`` a round."""

    def run(self, job: RunJob) -> None:
        super().run(
            RunJob(job.config, job.run, job.shards, job.initial_params, job.hooks, job.run_dir, _Drifting(job.progress))
        )


def _experiment(tmp_path, tolerance: float | None):
    data = base_config()
    data.update(hooks=None)
    data["training"]["rounds"] = 3
    data["runs"] = [
        {"name": "reference", "framework": "reference"},
        {"name": "again", "framework": "reference"},
        {"name": "gpu", "framework": "reference"},
    ]
    if tolerance is not None:
        data["compare"] = {"tolerance": tolerance}
    config = ExperimentConfig.model_validate(data)
    comparison = run_experiment(
        config, tmp_path, lambda run: DriftingBackend() if run.name == "gpu" else backend_for(run)
    )
    return comparison, tmp_path / config.name


def test_a_run_within_the_experiment_s_tolerance_is_within_it_not_identical(tmp_path):
    comparison, experiment = _experiment(tmp_path, tolerance=1e-5)
    assert comparison["tolerance"] == 1e-5
    rows = {row["run"]: row for row in comparison["runs"]}
    assert rows["again"]["agreement"] == "identical" and rows["again"]["param_diff_per_round"] == [0.0] * 3
    assert rows["gpu"]["agreement"] == "within 1e-05" and rows["gpu"]["first_divergent_round"] is None
    assert 0 < rows["gpu"]["max_param_diff_vs_reference"] <= 1e-5
    assert json.loads((experiment / "comparison.json").read_text())["runs"][2]["agreement"] == "within 1e-05"
    table = format_table(comparison)
    assert "vs reference" in table.splitlines()[0]
    assert [line.split()[-1] for line in table.splitlines()[2:]] == ["-", "identical", "1e-05"]  # "within 1e-05"
    assert "within 1e-05" in table.splitlines()[4]
    figure = draw_report(experiment)
    accuracy, _, divergence, _ = figure.axes
    legend = [line.get_label() for line in accuracy.get_lines()]
    assert legend == ["again (identical to reference)", "gpu (within 1e-05)", "reference"], legend
    labels = [line.get_label() for line in divergence.get_lines()][:2]
    assert labels[0] == "again (identical; 0 after round 3)" and labels[1].startswith("gpu (within 1e-05; "), labels
    plt.close(figure)


def test_the_default_tolerance_names_the_first_round_beyond_it(tmp_path):
    comparison, experiment = _experiment(tmp_path, tolerance=None)
    assert comparison["tolerance"] == TOLERANCE == 1e-9
    gpu = comparison["runs"][2]
    assert (gpu["agreement"], gpu["first_divergent_round"]) == ("beyond 1e-09 from round 1", 1)
    assert "beyond 1e-09 from round 1" in format_table(comparison).splitlines()[4]
    figure = draw_report(experiment)
    assert "gpu (beyond 1e-09 from round 1)" in [line.get_label() for line in figure.axes[0].get_lines()]
    plt.close(figure)


def test_agreement_is_identical_only_when_every_distance_is_zero():
    assert agreement([0.0, 0.0], 0.0, 1e-3) == "identical"
    assert agreement([0.0, 1e-12], 1e-12, 1e-9) == "within 1e-09"  # one round off in the last bits
    assert agreement([0.0, 2e-9, 0.0], 0.0, 1e-9) == "beyond 1e-09 from round 2"
    assert agreement([], 1e-6, 1e-9) == "beyond 1e-09 (final model)"  # no round's model kept
    assert agreement([np.float64(0.0)], 0.0, 0.0) == "identical"


def test_a_negative_tolerance_is_one_line_naming_the_field(write_config):
    data = base_config()
    data["compare"] = {"tolerance": -1}
    path = write_config(data)
    with pytest.raises(InputError, match=r"compare\.tolerance: .*greater than or equal to 0"):
        load_config(path)
