"""Record one run: per-round metrics as JSONL, timings, models, and a summary written last.

``summary.json`` is written only when the run ends, through a rename, with a
``status`` of ``completed``, ``failed``, ``interrupted`` or ``unsupported`` (the framework has
no implementation of its own for the strategy: ``error`` says so); a run killed outright
leaves no summary at all. A stale summary is removed when a run starts.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fltest import __version__
from fltest.hooks import Metrics
from fltest.interrupts import stop_signals_deferred
from fltest.params import Params, save_params
from fltest.results.files import write_json_atomic
from fltest.rounds import RoundPrivacy

log = logging.getLogger(__name__)


def drop_round_models(run_dir: Path) -> None:
    """Remove a run's per-round models (``models/``), kept only with ``output.save_round_models``."""
    shutil.rmtree(run_dir / "models", ignore_errors=True)


class RunRecorder:
    """Collects one run's rounds and writes its results folder."""

    def __init__(self, run_dir: Path, info: dict[str, Any], rounds: int) -> None:
        """Prepare ``run_dir`` for a fresh run; ``info`` goes into the summary as it is."""
        self.run_dir = run_dir
        self.info = info
        self.rounds = rounds
        self.timings: dict[str, float] = {}
        self.last_round = -1
        self.final_metrics: Metrics = {}
        self._final_params: Params | None = None
        self._started = time.perf_counter()
        self._last_mark = self._started
        self._started_at = datetime.now(UTC).isoformat()
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("summary.json", "metrics.jsonl", "timings.json", "model_final.npz"):
            (run_dir / stale).unlink(missing_ok=True)
        drop_round_models(run_dir)
        (run_dir / "models").mkdir()
        self._metrics_file = (run_dir / "metrics.jsonl").open("a")
        self._bar = tqdm(
            total=rounds, desc=info.get("run", "run"), unit="round", file=sys.stderr, disable=None, leave=True
        )

    def setup_done(self) -> None:
        """Mark the end of the backend's setup: it is timed as ``setup_s``, not as round 1."""
        now = time.perf_counter()
        self.timings["setup_s"] = now - self._last_mark
        self._last_mark = now

    def record_round(
        self,
        server_round: int,
        params: Params,
        test_metrics: Metrics,
        train_metrics: Metrics | None = None,
        clients: list[int] | None = None,
        round_s: float | None = None,
        privacy: RoundPrivacy | None = None,
    ) -> None:
        """Append one round's metrics (round 0 is the initial model) and keep its model; ``round_s``: the round's time
        as the framework measured it, else the time since the last round (or the set-up) ended, as recorded here;
        ``privacy``: what a private round released."""
        if server_round != self.last_round + 1:
            raise RuntimeError(f"round {server_round} recorded after round {self.last_round}")
        now = time.perf_counter()
        record = {
            "round": server_round,
            "test": test_metrics,
            "train": train_metrics or {},
            "clients": clients or [],
            "round_s": round(now - self._last_mark if round_s is None else round_s, 6),
            "elapsed_s": round(now - self._started, 6),
        }
        if privacy is not None:
            record["privacy"] = asdict(privacy)
        with stop_signals_deferred():  # a stop signal here waits: the line, the model and the count agree
            self._last_mark = now
            self._metrics_file.write(json.dumps(record, sort_keys=True) + "\n")
            self._metrics_file.flush()
            save_params(self.run_dir / "models" / f"round-{server_round:04d}.npz", params)
            self.last_round = server_round
            self.final_metrics = test_metrics
            self._final_params = params
        if server_round > 0:
            self._bar.update(1)
            self._bar.set_postfix(accuracy=f"{test_metrics['accuracy']:.4f}")
            if self._bar.disable:
                log.info(
                    "%s round %d/%d accuracy=%.4f loss=%.4f",
                    self.info.get("run"),
                    server_round,
                    self.rounds,
                    test_metrics["accuracy"],
                    test_metrics["loss"],
                )

    def finish(self, status: str, error: str | None = None) -> dict[str, Any]:
        """Close the run with ``status``; writes timings, the final model and ``summary.json`` (a stop signal waits)."""
        with stop_signals_deferred():
            return self._finish(status, error)

    def _finish(self, status: str, error: str | None) -> dict[str, Any]:
        self._bar.close()
        self._metrics_file.close()
        if status == "completed" and self.last_round != self.rounds:
            status, error = "failed", f"the run ended after round {self.last_round} of {self.rounds}"
        wall = time.perf_counter() - self._started
        timings = {"wall_s": round(wall, 6), **{k: round(v, 6) for k, v in self.timings.items()}}
        write_json_atomic(self.run_dir / "timings.json", timings)
        if self._final_params is not None:
            save_params(self.run_dir / "model_final.npz", self._final_params)
        summary = {
            **self.info,
            "status": status,
            "error": error,
            "rounds_planned": self.rounds,
            "rounds_completed": max(self.last_round, 0),
            "final": self.final_metrics,
            "wall_s": timings["wall_s"],
            "started_at": self._started_at,
            "finished_at": datetime.now(UTC).isoformat(),
            "fltest_version": __version__,
        }
        write_json_atomic(self.run_dir / "summary.json", summary)
        return summary
