"""Stopping a run as users do: Ctrl-C in a terminal (SIGINT to every process of the command) and a
scheduler's SIGTERM (to fltest alone). fltest stops the framework, keeps the rounds so far with a
summary saying ``interrupted``, ends with one line naming what it stopped, exits 130, and leaves no
process behind (Ray's, NVFlare's simulator and workers)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from tests.conftest import base_config

SLOW_HOOKS = (  # a slow client, so that the interrupt lands mid-run
    "import time\ndef before_local_training(partition_id, server_round, x, y):\n    time.sleep(0.3)\n"
)
INTERRUPT_AT = "round 2/"
START_TIMEOUT_S = 240  # Ray or the NVFlare simulator starting on a loaded 2-core machine
STOP_TIMEOUT_S = 60
MARK_VARIABLE = "FLTEST_INTERRUPT_TEST"  # in the command's environment, and so in every process it starts
LEFTOVER_WAIT_S = 30  # for a private Ray's processes to end after fltest (Ray's own exit handler stops them)


def _as_in_a_terminal() -> None:
    """SIGINT as a terminal's shell leaves it for its commands: handled (a test runner started in the
    background by a non-interactive shell inherits it ignored, and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _command_processes(session: int, mark: str) -> list[str]:
    """The processes still in ``session`` (the command's own session), or started from it in sessions of their own
    (a simulation SuperLink and what it starts: they carry the command's environment, with ``mark`` in it), as
    ``pid name``."""
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if os.getsid(process.pid) == session or process.environ().get(MARK_VARIABLE) == mark:
                found.append(f"{process.pid} {process.info['name']}")
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _interrupt_mid_run(write_config, tmp_path, run: dict, how: str) -> tuple[int | None, list[str], list[str]]:
    """Start ``fltest run`` with ``run`` in a session of its own and stop it at round 2.

    ``how``: ``ctrl-c`` (SIGINT to the whole process group, as a terminal sends it) or ``sigterm``
    (SIGTERM to the fltest process alone, as ``kill`` or a scheduler sends it). Returns the exit code
    (``None``: still running ``STOP_TIMEOUT_S`` after the signal, then killed), the stderr lines, and
    the processes of the session left ``LEFTOVER_WAIT_S`` after fltest ended.
    """
    (tmp_path / "slow_hooks.py").write_text(SLOW_HOOKS)
    data = base_config()
    data["hooks"] = "slow_hooks"
    data["training"]["rounds"] = 20
    data["training"]["round_timeout_s"] = 600  # a ServerApp still waiting for replies would outlive the test
    data["runs"] = [run]
    path = write_config(data)
    mark = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "fltest.cli", "run", path.name],
        cwd=tmp_path,
        env={**os.environ, MARK_VARIABLE: mark},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_in_a_terminal,
    )
    lines: list[str] = []
    reached = threading.Event()

    def read_stderr() -> None:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if INTERRUPT_AT in line:
                reached.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    leftovers: list[str] = []
    try:
        assert reached.wait(START_TIMEOUT_S), lines[-20:]
        if how == "ctrl-c":
            os.killpg(process.pid, signal.SIGINT)
        else:
            os.kill(process.pid, signal.SIGTERM)
        try:
            code = process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while (leftovers := _command_processes(process.pid, mark)) and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid_name in _command_processes(process.pid, mark):  # what the test itself must not leave
            os.kill(int(pid_name.split()[0]), signal.SIGKILL)
    reader.join(timeout=10)
    return code, lines, leftovers


def _assert_interrupted(code, lines, leftovers, tmp_path, run: str, framework: str, signal_name: str) -> None:
    assert code == 130, lines[-30:]
    pattern = (
        rf"fltest: interrupted \({signal_name}\): stopped run {run} \({framework}\) after round (\d+) of 20; "
        rf"its rounds and summary: {re.escape(str(tmp_path / 'results' / 'digits-demo' / run))}"
    )
    match = re.fullmatch(pattern, lines[-1])
    assert match, lines[-30:]
    assert not any(line.startswith("Traceback") for line in lines), lines
    summary = json.loads((tmp_path / "results" / "digits-demo" / run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["error"] == f"interrupted by {signal_name}", summary
    assert 2 <= summary["rounds_completed"] < 20 and summary["rounds_completed"] == int(match.group(1)), summary
    assert leftovers == [], f"still running {LEFTOVER_WAIT_S} s after fltest ended: {leftovers}"


RUNS = {
    "reference": pytest.param({"name": "reference", "framework": "reference"}, id="reference"),
    "flwr": pytest.param({"name": "flower", "framework": "flwr"}, id="flower", marks=pytest.mark.ray),
    "nvflare": pytest.param({"name": "nvflare", "framework": "nvflare"}, id="nvflare", marks=pytest.mark.nvflare),
}


@pytest.mark.parametrize("run", RUNS.values())
def test_ctrl_c_stops_the_run_keeps_its_rounds_and_leaves_nothing_running(write_config, tmp_path, run):
    code, lines, leftovers = _interrupt_mid_run(write_config, tmp_path, run, "ctrl-c")
    _assert_interrupted(code, lines, leftovers, tmp_path, run["name"], run["framework"], "SIGINT")


@pytest.mark.parametrize("run", RUNS.values())
def test_sigterm_to_fltest_alone_stops_the_run_the_same_way(write_config, tmp_path, run):
    code, lines, leftovers = _interrupt_mid_run(write_config, tmp_path, run, "sigterm")
    _assert_interrupted(code, lines, leftovers, tmp_path, run["name"], run["framework"], "SIGTERM")
