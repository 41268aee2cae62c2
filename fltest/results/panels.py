"""The report's panels that only some experiments call for: under an attack, each run's distance from the attack-free
model; with differential privacy, test accuracy against the privacy spent. An experiment with neither draws neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

if TYPE_CHECKING:  # report.py draws these panels
    from fltest.results.report import RunCurves

DISTANCES = "distance_from_attack_free_per_round"  # comparison.json's, per run (fltest.results.compare)
Panel = Callable[[Axes, dict[str, dict[str, str]]], None]  # draws on an axis, each run in its style (by run name)


def shown_name(run: str) -> str:
    """A run's name as the report shows it: the attack-free run's (``_attack-free``) without the ``_`` that would make
    matplotlib leave its line out of every legend (no run of a config starts with one)."""
    return run.removeprefix("_")


def extra_panels(runs: list[RunCurves], comparison: dict[str, Any]) -> list[Panel]:
    """The panels the experiment's results call for, in this order: the distance from the attack-free model when
    ``comparison`` has distances from it (the experiment had an attack), accuracy against ε when a run spent one."""
    panels: list[Panel] = []
    rows = [row for row in comparison.get("runs", []) if row.get(DISTANCES)]
    if rows:
        panels.append(partial(draw_attack_free_distance, rows=rows))
    private = [run for run in runs if any(epsilon is not None for epsilon in run.epsilon)]
    if private:
        panels.append(partial(draw_privacy_utility, runs=private))
    return panels


def draw_attack_free_distance(axis: Axes, styles: dict[str, dict[str, str]], rows: list[dict[str, Any]]) -> None:
    """Each run's L2 distance from the attack-free run's global model after every round (``comparison.json``'s
    ``distance_from_attack_free_per_round`` of ``rows``), in the run's style, on a scale linear up to the power of 10
    below the smallest distance above 0 and logarithmic above it: an attack a strategy withstands and one that ruins its
    model differ by orders of magnitude."""
    for row in rows:
        distances = row[DISTANCES]
        axis.plot(
            range(1, len(distances) + 1),
            distances,
            **styles.get(row["run"], {}),
            markerfacecolor="none",
            label=f"{shown_name(row['run'])} ({distances[-1]:.3g} after round {len(distances)})",
        )
    positive = [distance for row in rows for distance in row[DISTANCES] if distance > 0]
    if positive:
        axis.set_yscale("symlog", linthresh=10 ** math.floor(math.log10(min(positive))))
    axis.set_ylim(bottom=0)  # a distance: no negative half of the symlog scale
    axis.set_xlabel("round")
    axis.set_ylabel("‖w − w_attack-free‖₂")
    axis.set_title("distance from the attack-free model")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")


def draw_privacy_utility(axis: Axes, styles: dict[str, dict[str, str]], runs: list[RunCurves]) -> None:
    """Each of ``runs``' test accuracy after a round against the ε it had spent by then (its ``metrics.jsonl``'s
    ``privacy`` records; a round without an ε is left out), in the run's style; the title gives δ, or each run's
    label gives its own when they differ."""
    deltas = sorted({run.delta for run in runs if run.delta is not None})
    for run in runs:
        spent = [index for index, epsilon in enumerate(run.epsilon) if epsilon is not None]
        label = shown_name(run.name) + (f" (δ = {run.delta:g})" if len(deltas) > 1 and run.delta is not None else "")
        axis.plot(
            [run.epsilon[index] for index in spent],
            [run.accuracy[index] for index in spent],
            **styles.get(run.name, {}),
            markerfacecolor="none",
            label=label,
        )
    axis.set_xlabel("ε spent (after each round)")
    axis.set_ylabel("test accuracy")
    axis.set_title("test accuracy against ε" + (f" (δ = {deltas[0]:g})" if len(deltas) == 1 else ""))
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
