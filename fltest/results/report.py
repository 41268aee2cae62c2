"""Draw accuracy and loss per round, one line per run, to a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from fltest.errors import InputError  # noqa: E402
from fltest.results.files import read_jsonl  # noqa: E402


def plot_report(experiment_dir: Path, output: Path | None = None) -> Path:
    """Plot every run under ``experiment_dir`` that has metrics; returns the PNG's path."""
    experiment_dir = Path(experiment_dir)
    if not experiment_dir.is_dir():
        raise InputError(f"{experiment_dir}: results folder not found")
    runs = sorted(p for p in experiment_dir.iterdir() if (p / "metrics.jsonl").is_file())
    if not runs:
        raise InputError(f"{experiment_dir}: no run with metrics.jsonl in this folder")
    output = Path(output) if output else experiment_dir / "report.png"
    figure, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run_dir in runs:
        records = read_jsonl(run_dir / "metrics.jsonl")
        rounds = [r["round"] for r in records]
        acc_ax.plot(rounds, [r["test"]["accuracy"] for r in records], marker="o", label=run_dir.name)
        loss_ax.plot(rounds, [r["test"]["loss"] for r in records], marker="o", label=run_dir.name)
    for axis, title in ((acc_ax, "test accuracy"), (loss_ax, "test loss")):
        axis.set_xlabel("round")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(experiment_dir.name)
    figure.tight_layout()
    tmp = output.with_name(f".{output.stem}.tmp.png")
    figure.savefig(tmp, dpi=110)
    plt.close(figure)
    tmp.replace(output)
    return output
