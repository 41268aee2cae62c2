"""The report PNG: coinciding curves stay visible and say so, integer round ticks, a time panel."""

from __future__ import annotations

import json
import re
import warnings

import matplotlib.pyplot as plt
import pytest

from fltest.config.schema import ExperimentConfig
from fltest.results.report import IDENTICAL, draw_report, plot_report
from fltest.results.table import format_table
from fltest.runner import run_experiment
from tests.conftest import base_config

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _two_reference_runs(tmp_path):
    """A real experiment with two runs whose curves coincide: ``reference`` and ``again``."""
    data = base_config()
    data["training"]["rounds"] = 3
    data["hooks"] = None
    data["runs"] = [{"name": "reference", "framework": "reference"}, {"name": "again", "framework": "reference"}]
    run_experiment(ExperimentConfig.model_validate(data), tmp_path)
    return tmp_path / data["name"]


def _perturb_accuracy(run_dir, delta):
    """Change one run's recorded accuracies, as a run that trained differently would have them."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for record in lines:
        record["test"]["accuracy"] += delta
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_coinciding_curves_have_their_own_style_and_say_so(tmp_path):
    experiment = _two_reference_runs(tmp_path)
    figure = draw_report(experiment)
    accuracy_axis, loss_axis, _, _ = figure.axes
    for axis in (accuracy_axis, loss_axis):
        lines = axis.get_lines()
        assert [line.get_label() for line in lines] == [f"again ({IDENTICAL})", "reference"]
        assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 2
        ticks = [t for t in axis.get_xticks() if 0 <= t <= 3]
        assert ticks and all(float(t).is_integer() for t in ticks)
        assert [t.get_text() for t in axis.get_legend().get_texts()] == [f"again ({IDENTICAL})", "reference"]
    plt.close(figure)


def test_a_run_that_differs_is_not_called_identical(tmp_path):
    experiment = _two_reference_runs(tmp_path)
    _perturb_accuracy(experiment / "again", 0.01)
    figure = draw_report(experiment)
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["again", "reference"]
    plt.close(figure)


def test_time_panel_shows_setup_and_median_round_of_every_run(tmp_path):
    experiment = _two_reference_runs(tmp_path)
    figure = draw_report(experiment)
    time_axis = figure.axes[3]
    assert [t.get_text() for t in time_axis.get_yticklabels()] == ["again", "reference"]
    bars = {container.get_label(): [bar.get_width() for bar in container] for container in time_axis.containers}
    for run, index in (("again", 0), ("reference", 1)):
        timings = json.loads((experiment / run / "timings.json").read_text())
        rounds = [json.loads(line)["round_s"] for line in (experiment / run / "metrics.jsonl").read_text().splitlines()]
        assert bars["setup"][index] == timings["setup_s"]
        assert bars["median round"][index] == sorted(rounds[1:])[1]  # the median of three rounds
    plt.close(figure)


def test_runs_that_failed_before_their_setup_was_timed_draw_without_a_warning(tmp_path):
    """A run that failed at its start (its framework's server did not start) has no setup time and no round: its time
    panel is drawn on a linear axis of zeros, and matplotlib's warning about a log scale with no positive value (a
    line the user can do nothing about) is not printed."""
    experiment = _two_reference_runs(tmp_path)
    for run in ("again", "reference"):
        (experiment / run / "timings.json").write_text("{}")
        (experiment / run / "metrics.jsonl").write_text(
            (experiment / run / "metrics.jsonl").read_text().splitlines()[0]
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = draw_report(experiment)
    time_axis = figure.axes[3]
    assert (time_axis.get_xscale(), time_axis.get_xlabel()) == ("linear", "seconds")
    plt.close(figure)


def _drifted(experiment):
    """The experiment's comparison as it is, then with ``again`` drifting from round 2 (as a run whose rule differs would)."""
    comparison = json.loads((experiment / "comparison.json").read_text())
    drifted = json.loads(json.dumps(comparison))
    drifted["runs"][1].update(
        param_diff_per_round=[0.0, 1e-6, 2e-3],
        first_divergent_round=2,
        max_param_diff_vs_reference=2e-3,
        agreement="beyond 1e-09 from round 2",
    )
    return comparison, drifted


def test_divergence_panel_draws_each_run_s_distance_to_the_reference_a_round(tmp_path):
    experiment = _two_reference_runs(tmp_path)
    comparison, drifted = _drifted(experiment)
    figure = draw_report(experiment)
    assert [line.get_label() for line in figure.axes[2].get_lines()][0] == "again (identical; 0 after round 3)"
    plt.close(figure)
    (experiment / "comparison.json").write_text(json.dumps(drifted))
    figure = draw_report(experiment)
    divergence_axis = figure.axes[2]
    drawn = {line.get_label(): list(line.get_ydata()) for line in divergence_axis.get_lines()}
    assert drawn["again (beyond 1e-09 from round 2; 0.002 after round 3)"] == [0.0, 1e-6, 2e-3]
    assert drawn[f"tolerance {comparison['tolerance']:g}"] == [comparison["tolerance"]] * 2
    assert divergence_axis.get_yscale() == "symlog" and divergence_axis.get_ylim()[0] == 0
    plt.close(figure)


def test_the_table_gives_each_run_s_first_divergent_round_and_its_distance_after_the_last_round(tmp_path):
    comparison, drifted = _drifted(_two_reference_runs(tmp_path))
    header, _, reference, again = format_table(comparison).splitlines()
    assert header.split()[-5:] == ["|dw|", "last", "round", "vs", "reference"]
    assert reference.split()[-2:] == ["-", "-"] and again.split()[-2:] == ["0.0000", "identical"]  # the same model
    assert format_table(drifted).splitlines()[3].split()[-6:] == ["0.0020", "beyond", "1e-09", "from", "round", "2"]


def test_plot_report_writes_a_png(tmp_path):
    experiment = _two_reference_runs(tmp_path)
    out = plot_report(experiment, tmp_path / "out.png")
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    assert not list(tmp_path.glob(".*.tmp.png"))


def test_a_run_has_one_color_line_style_and_marker_in_every_panel(tmp_path):
    experiment = _two_reference_runs(tmp_path)
    figure = draw_report(experiment)
    accuracy_axis, loss_axis, divergence_axis, _ = figure.axes

    def looks(axis):
        return {
            line.get_label().split(" (")[0]: (line.get_color(), line.get_linestyle(), line.get_marker())
            for line in axis.get_lines()
            if not line.get_label().startswith("tolerance")
        }

    assert looks(accuracy_axis) == looks(loss_axis)
    assert looks(divergence_axis) == {"again": looks(accuracy_axis)["again"]}  # the run compared with the reference
    assert looks(accuracy_axis)["again"] != looks(accuracy_axis)["reference"]
    plt.close(figure)


def test_the_time_against_the_reference_is_the_run_s_wall_time_over_the_reference_s(tmp_path):
    """The table's `x ref time` (comparison.json's wall_ratio_vs_reference): how many times the reference's wall time a
    run took, from the runs' own summaries."""
    experiment = _two_reference_runs(tmp_path)
    comparison = json.loads((experiment / "comparison.json").read_text())
    again = next(row for row in comparison["runs"] if row["run"] == "again")
    wall = {
        run: json.loads((experiment / run / "summary.json").read_text())["wall_s"] for run in ("reference", "again")
    }
    assert again["wall_ratio_vs_reference"] == wall["again"] / wall["reference"]
    row = next(line for line in format_table(comparison).splitlines() if line.startswith("again "))
    assert f"{wall['again'] / wall['reference']:.4f}" in row.split()


def _columns(table: str) -> list[list[str]]:
    """The table's lines cut into cells at the columns its line of dashes marks."""
    lines = table.splitlines()
    spans = [match.span() for match in re.finditer(r"-+", lines[1])]
    return [[line[start:end].strip() for start, end in spans] for line in [lines[0], *lines[2:]]]


def test_the_table_has_the_pages_columns_and_each_run_s_figures(tmp_path):
    """first-experiment.md and results.md: a row a run with its status, rounds, accuracy, loss, wall time, time against
    the reference, distance after the last round and agreement, read from comparison.json."""
    comparison = json.loads((_two_reference_runs(tmp_path) / "comparison.json").read_text())
    header, *rows = _columns(format_table(comparison))
    assert header == [
        "run", "framework", "status", "rounds", "accuracy", "loss", "wall s", "x ref time", "|dw| last round",
        "vs reference",
    ]  # fmt: skip
    for cells, run in zip(rows, comparison["runs"], strict=True):
        assert cells[:4] == [run["run"], run["framework"], run["status"], str(run["rounds_completed"])]
        assert [float(cell) for cell in cells[4:7]] == pytest.approx(
            [run["accuracy"], run["loss"], run["wall_s"]], abs=5e-5
        )
    assert rows[0][7:] == ["-", "-", "-"]  # the reference against itself
    assert float(rows[1][7]) == pytest.approx(comparison["runs"][1]["wall_ratio_vs_reference"], abs=5e-5)
    assert rows[1][8:] == ["0.0000", "identical"]


def _private_run(experiment, name, epsilons, accuracies, delta=1e-5):
    """A run folder written by hand, as a private run leaves it: round 0 without a privacy record, then a round an
    accuracy and a privacy record (``epsilons``: ε after the round, ``None`` where the framework has no accountant)."""
    records = [{"round": 0, "test": {"accuracy": 0.1, "loss": 2.3}, "round_s": 0.0}]
    for server_round, (epsilon, accuracy) in enumerate(zip(epsilons, accuracies, strict=True), start=1):
        privacy = {
            "clipping_norm": 1.0,
            "noise_std": 0.02,
            "noise_std_expected": 0.02,
            "epsilon": epsilon,
            "delta": delta,
        }
        records.append(
            {"round": server_round, "test": {"accuracy": accuracy, "loss": 1.0}, "round_s": 0.1, "privacy": privacy}
        )
    (experiment / name).mkdir(parents=True)
    (experiment / name / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (experiment / name / "summary.json").write_text(json.dumps({"framework": "reference", "status": "completed"}))


def test_the_privacy_panel_draws_each_private_run_s_accuracy_against_its_epsilon(tmp_path):
    """A run that spent an ε gets a line in a panel of accuracy against ε, its points its rounds' records, titled with
    δ; a run without an accountant (ε null) has none; an experiment without privacy records has no such panel."""
    experiment = tmp_path / "private"
    _private_run(experiment, "strong", [0.5, 0.8, 1.1], [0.4, 0.55, 0.6])
    _private_run(experiment, "weak", [2.0, 3.5, 4.75], [0.7, 0.8, 0.85])
    _private_run(experiment, "unaccounted", [None, None, None], [0.6, 0.7, 0.75])
    figure = draw_report(experiment)
    panels = [axis for axis in figure.axes if axis.get_title().startswith("test accuracy against ε")]
    assert [axis.get_title() for axis in panels] == ["test accuracy against ε (δ = 1e-05)"]
    drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in panels[0].get_lines()}
    assert drawn == {"strong": ([0.5, 0.8, 1.1], [0.4, 0.55, 0.6]), "weak": ([2.0, 3.5, 4.75], [0.7, 0.8, 0.85])}
    plt.close(figure)
    figure = draw_report(_two_reference_runs(tmp_path))
    assert len(figure.axes) == 4 and not [axis for axis in figure.axes if "ε" in axis.get_title()]
    plt.close(figure)
