"""Compare every run of an experiment with its reference run, and under an attack with the attack-free run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fltest.params import load_params
from fltest.results.files import read_jsonl, write_json_atomic

# The default |Δw| up to which a run's global model agrees with the reference's (an experiment's
# compare.tolerance replaces it). FedAvg and FedProx measured 0 (bit for bit) on every framework on the
# CPU; a run beyond it in some round "diverges" from that round on.
TOLERANCE = 1e-9
IDENTICAL = "identical"
# The reference run on the attacked experiment's config without its attack, which the runner adds: the run every run's
# distance from the attack-free model is measured from. A run of the config cannot have this name (a run name starts
# with a letter or a digit: fltest.config.runs.RUN_NAME_PATTERN).
ATTACK_FREE = "_attack-free"


def max_param_difference(a: Path, b: Path) -> float:
    """Largest absolute difference between two saved parameter lists."""
    left, right = load_params(a), load_params(b)
    return float(max(np.max(np.abs(x - y)) for x, y in zip(left, right, strict=True)))


def l2_distance(a: Path, b: Path) -> float:
    """The Euclidean distance between two saved parameter lists, all their parameters taken as one vector."""
    left, right = load_params(a), load_params(b)
    return float(np.sqrt(sum(np.sum(np.square(x - y)) for x, y in zip(left, right, strict=True))))


def differences_per_round(
    run_dir: Path, reference_dir: Path, measure: Callable[[Path, Path], float] = max_param_difference
) -> list[float]:
    """``measure`` (by default |Δw|) between the two runs' global models after each round both recorded
    (``models/round-NNNN.npz``), from round 1."""
    rounds = []
    for path in sorted((run_dir / "models").glob("round-*.npz")):
        theirs = reference_dir / "models" / path.name
        if path.name != "round-0000.npz" and theirs.is_file():
            rounds.append(measure(path, theirs))
    return rounds


def first_divergent_round(differences: list[float], tolerance: float = TOLERANCE) -> int | None:
    """The first round (from 1) whose |Δw| exceeds ``tolerance``, or ``None`` if none does."""
    return next((index + 1 for index, difference in enumerate(differences) if difference > tolerance), None)


def agreement(differences: list[float], final_difference: float, tolerance: float) -> str:
    """How a run agrees with the reference: ``identical`` (every |Δw| is 0), ``within <tolerance>``, or
    ``beyond <tolerance> from round N`` (``differences``: |Δw| after each round from round 1; ``final_difference``:
    of the final models, which decides alone when no round's model was kept)."""
    if final_difference == 0 and all(difference == 0 for difference in differences):
        return IDENTICAL
    diverges = first_divergent_round(differences, tolerance)
    if diverges is not None:
        return f"beyond {tolerance:g} from round {diverges}"
    if final_difference > tolerance:
        return f"beyond {tolerance:g} (final model)"
    return f"within {tolerance:g}"


def compare_runs(experiment_dir: Path, summaries: list[dict[str, Any]], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Write ``comparison.json``: each run's results and its distance to the reference run, after each round
    (``param_diff_per_round``) and at the end, the first round beyond ``tolerance`` (the experiment's
    ``compare.tolerance``) and the run's :func:`agreement` with the reference.

    Under an attack, the runs include the :data:`ATTACK_FREE` run: each completed run gets its :func:`l2_distance`
    from that run's global model after each round (``distance_from_attack_free_per_round``; 0 for that run itself)
    and at the end (``distance_from_attack_free``), and that run, which differs from the reference by design, is
    neither compared with the reference nor taken for it.

    The per-round distances need the runs' ``models/`` folders, which the runner keeps until then.
    """
    completed = [s for s in summaries if s["status"] == "completed"]
    reference = next((s for s in completed if s["framework"] == "reference" and s["run"] != ATTACK_FREE), None)
    attack_free = next((s for s in completed if s["run"] == ATTACK_FREE), None)
    rows = []
    for summary in summaries:
        row = {k: summary[k] for k in ("run", "framework", "status", "rounds_completed", "wall_s")}
        if summary["status"] == "unsupported":  # not run: its final metrics are the initial model's
            row.update(accuracy=None, loss=None, reason=summary["error"])
        else:
            row.update(accuracy=summary["final"].get("accuracy"), loss=summary["final"].get("loss"))
        if attack_free is not None and summary["status"] == "completed":
            run_dir, free_dir = experiment_dir / summary["run"], experiment_dir / ATTACK_FREE
            row["distance_from_attack_free"] = l2_distance(run_dir / "model_final.npz", free_dir / "model_final.npz")
            row["distance_from_attack_free_per_round"] = differences_per_round(run_dir, free_dir, l2_distance)
        if (
            reference is not None
            and summary["status"] == "completed"
            and summary["run"] not in (reference["run"], ATTACK_FREE)
        ):
            run_dir, ref_dir = experiment_dir / summary["run"], experiment_dir / reference["run"]
            row["max_param_diff_vs_reference"] = max_param_difference(
                run_dir / "model_final.npz", ref_dir / "model_final.npz"
            )
            row["param_diff_per_round"] = differences_per_round(run_dir, ref_dir)
            row["first_divergent_round"] = first_divergent_round(row["param_diff_per_round"], tolerance)
            row["agreement"] = agreement(row["param_diff_per_round"], row["max_param_diff_vs_reference"], tolerance)
            ours, theirs = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(ref_dir / "metrics.jsonl")
            row["max_accuracy_diff_vs_reference"] = max(
                abs(a["test"]["accuracy"] - b["test"]["accuracy"]) for a, b in zip(ours, theirs)
            )
            row["wall_ratio_vs_reference"] = summary["wall_s"] / reference["wall_s"]
        rows.append(row)
    comparison = {"reference_run": reference["run"] if reference else None, "tolerance": tolerance, "runs": rows}
    write_json_atomic(experiment_dir / "comparison.json", comparison)
    return comparison
