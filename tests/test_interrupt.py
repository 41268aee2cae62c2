"""Ctrl-C in a terminal: every process of the run gets SIGINT; fltest ends with one line, exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.conftest import base_config

SLOW_HOOKS = (  # a slow client, so that the interrupt lands mid-run
    "import time\n"
    "def before_local_training(partition_id, server_round, x, y):\n"
    "    time.sleep(0.3)\n"
)
INTERRUPT_AT = "round 2/"
START_TIMEOUT_S = 240  # Ray or the NVFlare simulator starting on a loaded 2-core machine
STOP_TIMEOUT_S = 60


def _as_in_a_terminal() -> None:
    """SIGINT as a terminal's shell leaves it for its commands: handled (a test runner started in the
    background by a non-interactive shell inherits it ignored, and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_mid_run(write_config, tmp_path, run: dict) -> tuple[int | None, list[str]]:
    """Start ``fltest run`` with ``run`` in its own process group, SIGINT the group at round 2.

    Returns the exit code (``None``: still running ``STOP_TIMEOUT_S`` after the SIGINT, then
    killed) and the stderr lines.
    """
    (tmp_path / "slow_hooks.py").write_text(SLOW_HOOKS)
    data = base_config()
    data["hooks"] = "slow_hooks"
    data["training"]["rounds"] = 20
    data["training"]["round_timeout_s"] = 600  # a ServerApp still waiting for replies would outlive the test
    data["runs"] = [run]
    path = write_config(data)
    process = subprocess.Popen([sys.executable, "-m", "fltest.cli", "run", str(path)], cwd=tmp_path,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=_as_in_a_terminal)  # fmt: skip
    lines: list[str] = []
    reached = threading.Event()

    def read_stderr() -> None:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if INTERRUPT_AT in line:
                reached.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert reached.wait(START_TIMEOUT_S), lines[-20:]
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        try:
            code = process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(timeout=10)
    return code, lines


def _assert_interrupted(code: int, lines: list[str], tmp_path, run: str) -> None:
    assert code == 130, lines[-30:]
    assert lines[-1] == "fltest: interrupted", lines[-30:]
    assert not any(line.startswith("Traceback") for line in lines), lines
    summary = json.loads((tmp_path / "results" / "digits-demo" / run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["rounds_completed"] < 20, summary


def test_ctrl_c_on_a_reference_run(write_config, tmp_path):
    code, lines = _interrupt_mid_run(write_config, tmp_path, {"name": "reference", "framework": "reference"})
    _assert_interrupted(code, lines, tmp_path, "reference")


@pytest.mark.ray
def test_ctrl_c_on_a_flower_simulation(write_config, tmp_path):
    code, lines = _interrupt_mid_run(write_config, tmp_path, {"name": "flower", "framework": "flwr"})
    _assert_interrupted(code, lines, tmp_path, "flower")


@pytest.mark.nvflare
def test_ctrl_c_on_an_nvflare_simulation(write_config, tmp_path):
    code, lines = _interrupt_mid_run(write_config, tmp_path, {"name": "nvflare", "framework": "nvflare"})
    _assert_interrupted(code, lines, tmp_path, "nvflare")
