"""Compare every run of an experiment with its reference run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fltest.results.files import read_jsonl, write_json_atomic
from fltest.params import load_params


def max_param_difference(a: Path, b: Path) -> float:
    """Largest absolute difference between two saved parameter lists."""
    left, right = load_params(a), load_params(b)
    return float(max(np.max(np.abs(x - y)) for x, y in zip(left, right, strict=True)))


def compare_runs(experiment_dir: Path, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``comparison.json``: each run's results and its distance to the reference run."""
    reference = next((s for s in summaries if s["framework"] == "reference" and s["status"] == "completed"), None)
    rows = []
    for summary in summaries:
        row = {k: summary[k] for k in ("run", "framework", "status", "rounds_completed", "wall_s")}
        row["accuracy"] = summary["final"].get("accuracy")
        row["loss"] = summary["final"].get("loss")
        if reference is not None and summary["status"] == "completed" and summary is not reference:
            run_dir, ref_dir = experiment_dir / summary["run"], experiment_dir / reference["run"]
            row["max_param_diff_vs_reference"] = max_param_difference(
                run_dir / "model_final.npz", ref_dir / "model_final.npz"
            )
            ours, theirs = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(ref_dir / "metrics.jsonl")
            row["max_accuracy_diff_vs_reference"] = max(
                abs(a["test"]["accuracy"] - b["test"]["accuracy"]) for a, b in zip(ours, theirs)
            )
            row["wall_ratio_vs_reference"] = summary["wall_s"] / reference["wall_s"]
        rows.append(row)
    comparison = {"reference_run": reference["run"] if reference else None, "runs": rows}
    write_json_atomic(experiment_dir / "comparison.json", comparison)
    return comparison
