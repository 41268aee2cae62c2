"""Draw an experiment's runs to a PNG: test accuracy and loss per round, and each run's cost in time.

Runs usually agree with the reference to the last bit, so their curves coincide: each run
gets its own line style and marker, and the legend says how each run agrees with the reference
run (``comparison.json``): identical, within the experiment's tolerance, or beyond it from a round.
An attack or differential privacy adds a panel of its own (:mod:`fltest.results.panels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import cycle
from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fltest.errors import InputError  # noqa: E402
from fltest.results.compare import ATTACK_FREE  # noqa: E402
from fltest.results.compare import IDENTICAL as AGREES_EXACTLY  # noqa: E402
from fltest.results.files import read_json_object, read_jsonl  # noqa: E402
from fltest.results.panels import extra_panels, shown_name  # noqa: E402

LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
IDENTICAL = "identical to reference"


@dataclass(frozen=True)
class RunCurves:
    """What the report draws of one run: its per-round test metrics, the privacy it spent (``epsilon`` after each
    round, ``None`` where not private or not accounted, at the run's ``delta``) and its timings."""

    name: str
    framework: str
    status: str
    rounds: list[int]
    accuracy: list[float]
    loss: list[float]
    epsilon: list[float | None]
    delta: float | None
    setup_s: float | None
    round_s: list[float]

    @classmethod
    def read(cls, run_dir: Path) -> RunCurves:
        """Read a run's ``metrics.jsonl``, ``summary.json`` and ``timings.json`` (the last two may be missing)."""
        records = read_jsonl(run_dir / "metrics.jsonl")
        summary = read_json_object(run_dir / "summary.json")
        timings = read_json_object(run_dir / "timings.json")
        privacy = [r.get("privacy") or {} for r in records]  # rounds >= 1 of a private run
        return cls(
            name=run_dir.name,
            framework=summary.get("framework", ""),
            status=summary.get("status", ""),
            rounds=[r["round"] for r in records],
            accuracy=[r["test"]["accuracy"] for r in records],
            loss=[r["test"]["loss"] for r in records],
            epsilon=[p.get("epsilon") for p in privacy],
            delta=next((p["delta"] for p in reversed(privacy) if p.get("delta") is not None), None),
            setup_s=timings.get("setup_s"),
            round_s=[r["round_s"] for r in records if r["round"] > 0 and "round_s" in r],
        )

    def same_curves_as(self, other: RunCurves) -> bool:
        """Whether both runs drew exactly the same accuracy and loss at the same rounds."""
        return (self.rounds, self.accuracy, self.loss) == (other.rounds, other.accuracy, other.loss)


def read_runs(experiment_dir: Path) -> list[RunCurves]:
    """Every run under ``experiment_dir`` that has metrics, in name order."""
    experiment_dir = Path(experiment_dir)
    if not experiment_dir.is_dir():
        raise InputError(f"{experiment_dir}: results folder not found")
    runs = [RunCurves.read(p) for p in sorted(experiment_dir.iterdir()) if (p / "metrics.jsonl").is_file()]
    if not runs:
        raise InputError(f"{experiment_dir}: no run with metrics.jsonl in this folder")
    return runs


def reference_run(experiment_dir: Path, runs: list[RunCurves]) -> RunCurves | None:
    """The run the others are compared with: ``comparison.json``'s, else the first ``reference`` run (never the
    attack-free one, which differs from the others by design)."""
    name = read_json_object(Path(experiment_dir) / "comparison.json").get("reference_run")
    return next((r for r in runs if r.name == name), None) or next(
        (r for r in runs if r.framework == "reference" and r.name != ATTACK_FREE), None
    )


def legend_labels(runs: list[RunCurves], reference: RunCurves | None, agreements: dict[str, str]) -> list[str]:
    """Each run's legend label: its name, with its agreement with the reference run (``comparison.json``'s:
    ``identical to reference`` only when its models are the reference's bit for bit and its curves coincide,
    else ``within <tolerance>`` or ``beyond <tolerance> from round N``), or a note when its framework has no
    implementation of the strategy (``unsupported``: only round 0 drawn)."""

    def label(run: RunCurves) -> str:
        name = shown_name(run.name)
        if run.status == "unsupported":
            return f"{name} (unsupported: not run)"
        agreement = agreements.get(run.name)
        if reference is None or run is reference or agreement is None:
            return name
        if agreement == AGREES_EXACTLY:
            return f"{name} ({IDENTICAL})" if run.same_curves_as(reference) else name
        return f"{name} ({agreement})"

    return [label(run) for run in runs]


def draw_report(experiment_dir: Path) -> Figure:
    """The report figure: accuracy, loss and |Δw| from the reference per round, then each run's setup time
    and median time per round, then the panels only some experiments have (:func:`fltest.results.panels.extra_panels`:
    the distance from the attack-free model, accuracy against ε)."""
    runs = read_runs(experiment_dir)
    comparison = read_json_object(Path(experiment_dir) / "comparison.json")
    extras = extra_panels(runs, comparison)
    figure, (acc_ax, loss_ax, diff_ax, time_ax, *extra_axes) = plt.subplots(
        1, 4 + len(extras), figsize=(21 + 5.2 * len(extras), 4.6), width_ratios=(1, 1, 1, 0.9, *[1] * len(extras))
    )
    styles = run_styles(runs)
    agreements = {row["run"]: row["agreement"] for row in comparison.get("runs", []) if row.get("agreement")}
    labels = legend_labels(runs, reference_run(experiment_dir, runs), agreements)
    for index, (run, label) in enumerate(zip(runs, labels)):
        # The reference is a wide line underneath; the others are thin lines on it with hollow markers of
        # growing size, so that curves at the same points stay visible as concentric markers.
        under = run.framework == "reference"
        kwargs = {
            **styles[run.name],
            "linewidth": 4.0 if under else 1.5,
            "markersize": 6 if under else 7 + 3 * index,
            "markerfacecolor": None if under else "none",
            "markeredgewidth": 1.5,
            "zorder": 2 if under else 3,
            "label": label,
        }
        acc_ax.plot(run.rounds, run.accuracy, **kwargs)
        loss_ax.plot(run.rounds, run.loss, **kwargs)
    for axis, title in ((acc_ax, "test accuracy"), (loss_ax, "test loss")):
        axis.set_xlabel("round")
        axis.set_title(title)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    _draw_divergence(diff_ax, comparison, styles)
    _draw_times(time_ax, runs)
    for panel, axis in zip(extras, extra_axes, strict=True):
        panel(axis, styles)
    figure.suptitle(Path(experiment_dir).name)
    figure.tight_layout()
    return figure


def run_styles(runs: list[RunCurves]) -> dict[str, dict[str, str]]:
    """Each run's color, line style and marker, by run name, so that a run looks the same in every panel."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {
        run.name: {"color": color, "linestyle": style, "marker": marker}
        for run, color, style, marker in zip(runs, cycle(colors), cycle(LINE_STYLES), cycle(MARKERS))
    }


def divergence_label(row: dict) -> str:
    """A run's legend in the divergence panel: its agreement with the reference (``identical``, ``within <tolerance>``
    or the first round beyond it, :func:`fltest.results.compare.agreement`) and its |Δw| after the last round."""
    differences = row["param_diff_per_round"]
    diverges = row.get("first_divergent_round")
    agreement = row.get("agreement") or (
        f"from round {diverges}" if diverges else "within tolerance"
    )  # results from before it
    return f"{row['run']} ({agreement}; {differences[-1]:.2g} after round {len(differences)})"


def _draw_divergence(axis: plt.Axes, comparison: dict, styles: dict[str, dict[str, str]]) -> None:
    """Each run's |Δw| from the reference's global model after every round (``comparison.json``), in the
    run's own style (:func:`run_styles`) and labelled by :func:`divergence_label`, on a scale linear below
    the tolerance and logarithmic above, with the tolerance drawn."""
    tolerance = comparison.get("tolerance", 0.0)
    rows = [row for row in comparison.get("runs", []) if row.get("param_diff_per_round")]
    for row in rows:
        differences = row["param_diff_per_round"]
        axis.plot(
            range(1, len(differences) + 1),
            differences,
            **styles.get(row["run"], {}),
            markerfacecolor="none",
            label=divergence_label(row),
        )
    if tolerance:
        axis.axhline(tolerance, color="grey", linewidth=1, linestyle=":", label=f"tolerance {tolerance:g}")
        axis.set_yscale("symlog", linthresh=tolerance)
    axis.set_ylim(bottom=0)  # a distance: no negative half of the symlog scale
    axis.set_xlabel("round")
    axis.set_title("max |Δw| from the reference")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    if rows:
        axis.legend(fontsize="small")
    else:
        axis.text(0.5, 0.5, "no run to compare", ha="center", va="center", transform=axis.transAxes)


def _draw_times(axis: plt.Axes, runs: list[RunCurves]) -> None:
    """Two bars a run, on a log scale: setup (e.g. starting Ray or the simulator) and the median round."""
    height = 0.38
    positions = range(len(runs))
    setup = [run.setup_s or 0.0 for run in runs]
    per_round = [median(run.round_s) if run.round_s else 0.0 for run in runs]
    for offset, values, label in ((-height / 2, setup, "setup"), (height / 2, per_round, "median round")):
        bars = axis.barh([p + offset for p in positions], values, height=height, label=label)
        axis.bar_label(bars, labels=[f"{v:.3g} s" for v in values], fontsize="small", padding=2)
    axis.set_yticks(list(positions), [shown_name(run.name) for run in runs])
    axis.invert_yaxis()
    shown = [v for v in (*setup, *per_round) if v > 0]
    if shown:  # else every run failed before its setup was timed: a linear axis of zeros
        axis.set_xscale("log")
        axis.set_xlim(min(shown) / 3, max(shown) * 8)  # room for the value labels
    axis.set_xlabel("seconds (log scale)" if shown else "seconds")
    axis.set_title("time: setup and wall time per round")
    axis.legend(fontsize="small", loc="lower right")
    axis.grid(alpha=0.3, axis="x")


def plot_report(experiment_dir: Path, output: Path | None = None) -> Path:
    """Draw the report of every run under ``experiment_dir`` to a PNG; returns the PNG's path."""
    figure = draw_report(experiment_dir)
    output = Path(output) if output else Path(experiment_dir) / "report.png"
    tmp = output.with_name(f".{output.stem}.tmp.png")
    figure.savefig(tmp, dpi=110)
    plt.close(figure)
    tmp.replace(output)
    return output
