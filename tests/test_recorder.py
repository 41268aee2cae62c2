"""The run recorder's summary: ``completed`` only when every round ran (docs/reference/results.md)."""

from __future__ import annotations

import json
import signal
import sys

import numpy as np
import pytest

from fltest.interrupts import Interrupted, stop_signals_raise
from fltest.params import load_params
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


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_while_a_round_is_recorded_leaves_its_line_model_and_count_in_agreement(tmp_path, stop_signal):
    """Ctrl-C or SIGTERM arriving after a round's metrics line is written (here: as its model is saved) stops the
    run after that round: the summary counts every line of ``metrics.jsonl`` and the final model is that round's.
    (CI caught ``fltest-deploy run`` stopped by SIGTERM with 14 lines and ``rounds_completed`` 12.)"""
    recorder = RunRecorder(tmp_path / "run", {"run": "r", "framework": "reference"}, 3)
    recorder.record_round(0, [np.zeros(2)], METRICS)

    def signal_as_the_model_is_saved(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "save_params":
            sys.setprofile(None)
            signal.raise_signal(stop_signal)  # a real signal, delivered at the next bytecode in this thread

    with stop_signals_raise():
        with pytest.raises(Interrupted):
            sys.setprofile(signal_as_the_model_is_saved)
            try:
                recorder.record_round(1, [np.ones(2)], METRICS)
            finally:
                sys.setprofile(None)
        summary = recorder.finish("interrupted", "interrupted")
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == summary["rounds_completed"] + 1 == 2
    assert load_params(tmp_path / "run" / "model_final.npz")[0].tolist() == [1.0, 1.0]
