"""Benchmark: the whole strategy table on the digits, each framework's own implementation of every strategy against the reference's.

For every strategy (``fltest/config/strategies.py``, default parameters; FedProx with ``mu`` 0.1,
Multi-Krum with ``num_selected`` 2), one ``fltest`` experiment on the digits runs the reference, Flower and NVFlare side by side, with
the PyTorch CNN of ``examples/digits_cnn.yaml`` (``--model cnn``, the default: NVFlare's FedOpt
needs a PyTorch model) or the built-in softmax regression of ``examples/digits.yaml`` (``--model
logreg``). It prints one table, a line a run: its status, max |Δw| from the reference's global
model after each round, the first round beyond the tolerance, |Δw| after the last round and the
run's wall time; then why each framework that did not run did not (``unsupported``).
Run: ``python bench/strategies.py [--model cnn] [--rounds 5] [--clients 10] [--strategies NAME ...]``.
The cost of each new strategy's aggregation alone at 120 clients, Flower's class against the reference's rule:
``bench/aggregation_cost.py``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import Any

from fltest.config.loader import load_config
from fltest.config.strategies import STRATEGIES, example_strategy
from fltest.results.compare import TOLERANCE
from fltest.runner import run_experiment

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIGS = {"cnn": EXAMPLES / "digits_cnn.yaml", "logreg": EXAMPLES / "digits.yaml"}  # reference, Flower and NVFlare


def strategy_rows(config_path: Path, strategy: str, rounds: int, clients: int, work: Path) -> list[dict[str, Any]]:
    """One experiment with ``strategy``: its ``comparison.json`` rows, each with the strategy's name."""
    config = load_config(config_path)
    training = config.training.model_copy(update={"rounds": rounds})
    data = config.model_dump(mode="json") | {"name": f"bench-{strategy}", "clients": clients, "hooks": None}
    data["training"] = training.model_dump(mode="json") | {"strategy": example_strategy(strategy)}
    comparison = run_experiment(type(config).model_validate(data), work)
    return [{"strategy": strategy, **row} for row in comparison["runs"]]


def _number(value: float | None, width: int) -> str:
    return f"{value:{width}.2e}" if value is not None else f"{'-':>{width}}"


def print_table(rows: list[dict[str, Any]], rounds: int) -> None:
    """The whole table: a line a run, then the reason of each run not carried out."""
    print(f"\nmax |Δw| from the reference's global model after each round (tolerance {TOLERANCE:g}):")
    per_round = " ".join(f"{f'round {r}':>9}" for r in range(1, rounds + 1))
    print(
        f"{'strategy':11} {'run':10} {'status':12} {per_round}  {'diverges at':>11}  {'last round':>10}  {'wall s':>7}"
    )
    for row in rows:
        differences = row.get("param_diff_per_round") or [None] * rounds
        cells = " ".join(_number(d, 9) for d in differences)
        first = row.get("first_divergent_round") or "-"
        print(
            f"{row['strategy']:11} {row['run']:10} {row['status']:12} {cells}  {first:>11}  "
            f"{_number(row.get('max_param_diff_vs_reference'), 10)}  {row['wall_s']:7.1f}"
        )
    for row in rows:
        if row.get("reason"):
            print(f"{row['strategy']} on {row['run']}: not run: {row['reason']}")


def main() -> None:
    """Run every strategy and print the whole table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(CONFIGS), default="cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument(
        "--strategies",
        nargs="+",
        choices=STRATEGIES,
        default=list(STRATEGIES),
        metavar="NAME",
        help=f"the strategies to run (default: all, {' '.join(STRATEGIES)})",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fltest-bench-strategies-") as work:
        for strategy in args.strategies:
            print(f"running {strategy} on reference, flwr and nvflare ({args.model}) ...", flush=True)
            rows += strategy_rows(CONFIGS[args.model], strategy, args.rounds, args.clients, Path(work))
    print_table(rows, args.rounds)


if __name__ == "__main__":
    main()
