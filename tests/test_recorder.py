"""The run recorder's summary: ``completed`` only when every round ran (docs/reference/results.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fltest.results.recorder import RunRecorder

METRICS = {"accuracy": 0.5, "loss": 1.0}


def _run(tmp_path, rounds_recorded: int, rounds_planned: int = 3) -> dict:
    """A run that records rounds 0..``rounds_recorded`` of ``rounds_planned`` and says it completed."""
    recorder = RunRecorder(tmp_path / "run", {"run": "r", "framework": "reference"}, rounds_planned)
    for server_round in range(rounds_recorded + 1):
        recorder.record_round(server_round, [np.zeros(2)], METRICS)
    recorder.finish("completed")
    return json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.parametrize("rounds_recorded", [0, 2])
def test_a_run_that_ends_before_its_last_round_is_failed_whatever_its_backend_said(tmp_path, rounds_recorded):
    summary = _run(tmp_path, rounds_recorded)
    assert (summary["status"], summary["error"], summary["rounds_completed"]) == (
        "failed",
        f"the run ended after round {rounds_recorded} of 3",
        rounds_recorded,
    )


def test_a_run_with_every_round_is_completed(tmp_path):
    summary = _run(tmp_path, 3)
    assert (summary["status"], summary["error"], summary["rounds_completed"]) == ("completed", None, 3)
