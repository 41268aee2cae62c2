"""The table ``fltest run`` prints at the end."""

from __future__ import annotations

from typing import Any

from fltest.results.compare import ATTACK_FREE


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}"
    return str(value)


def format_table(comparison: dict[str, Any]) -> str:
    """A plain-text table: one row a run, with accuracy, loss, time, its distance to the reference after the last round
    and its agreement with it (``identical``, ``within <tolerance>``, or the first round beyond it), and under an attack
    its L2 distance from the attack-free run's model after the last round; then a line for each run its framework could
    not carry out with an implementation of its own (and why), and a line saying what the attack-free run is."""
    columns = [
        ("run", "run"),
        ("framework", "framework"),
        ("status", "status"),
        ("rounds", "rounds_completed"),
        ("accuracy", "accuracy"),
        ("loss", "loss"),
        ("wall s", "wall_s"),
        ("x ref time", "wall_ratio_vs_reference"),
        ("|dw| last round", "max_param_diff_vs_reference"),
        ("vs reference", "agreement"),
    ]
    attacked = any(row["run"] == ATTACK_FREE for row in comparison["runs"])
    if attacked:
        columns.append(("L2 to attack-free", "distance_from_attack_free"))
    rows = [[_cell(row.get(key)) for _, key in columns] for row in comparison["runs"]]
    widths = [max(len(title), *(len(r[i]) for r in rows)) for i, (title, _) in enumerate(columns)]
    lines = ["  ".join(title.ljust(w) for (title, _), w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows]
    lines += [f"{row['run']}: not run: {row['reason']}" for row in comparison["runs"] if row.get("reason")]
    if attacked:
        lines.append(f"{ATTACK_FREE}: the reference run without the attack")
    return "\n".join(lines)
