"""Benchmark: each framework's own implementation of every strategy against the reference's, round by round.

For every strategy (``fltest/config/strategies.py``, default parameters; FedProx with ``mu``
0.1), one ``fltest`` experiment on the digits runs the reference, Flower and NVFlare side by side
and this prints, a line a run, max |Δw| from the reference's global model after each round, the
first round beyond the tolerance, and why a framework did not run (``unsupported``).
Run: ``python bench/strategies.py [--rounds 5] [--clients 10] [--strategies NAME ...]``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from fltest.config.loader import load_config
from fltest.config.strategies import STRATEGIES
from fltest.results.compare import TOLERANCE
from fltest.runner import run_experiment

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits.yaml"  # reference, Flower and NVFlare
PARAMETERS = {"fedprox": {"mu": 0.1}}  # a strategy with no default for a parameter


def divergence_rows(strategy: str, rounds: int, clients: int, work: Path) -> list[tuple[str, str, str, list[float], int | None, str]]:
    """One experiment with ``strategy``: a row a run (strategy, run, status, |Δw| per round, first divergent round, reason)."""
    config = load_config(EXAMPLE)
    training = config.training.model_copy(update={"rounds": rounds})
    data = config.model_dump(mode="json") | {"name": f"bench-{strategy}", "clients": clients, "hooks": None}
    data["training"] = training.model_dump(mode="json") | {"strategy": {"name": strategy, **PARAMETERS.get(strategy, {})}}
    comparison = run_experiment(type(config).model_validate(data), work)
    return [
        (strategy, row["run"], row["status"], row.get("param_diff_per_round", []), row.get("first_divergent_round"),
         row.get("reason", ""))  # fmt: skip
        for row in comparison["runs"]
        if row["framework"] != "reference"
    ]


def main() -> None:
    """Run every strategy and print the divergence table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES), metavar="NAME",
                        help=f"the strategies to run (default: all, {' '.join(STRATEGIES)})")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fltest-bench-strategies-") as work:
        for strategy in args.strategies:
            print(f"running {strategy} on reference, flwr and nvflare ...", flush=True)
            rows += divergence_rows(strategy, args.rounds, args.clients, Path(work))
    print(f"\nmax |Δw| from the reference's global model after each round (tolerance {TOLERANCE:g}):")
    header = f"{'strategy':11} {'run':8} {'status':12} " + " ".join(f"{f'round {r}':>9}" for r in range(1, args.rounds + 1))
    print(header + "  diverges at")
    for strategy, run, status, differences, first, reason in rows:
        cells = " ".join(f"{d:9.2e}" for d in differences) if differences else f"{'-':>9} " * args.rounds
        print(f"{strategy:11} {run:8} {status:12} {cells}  {first if first else '-'}")
        if reason:
            print(f"{'':33}({reason})")


if __name__ == "__main__":
    main()
