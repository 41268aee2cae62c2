"""Ctrl-C or SIGTERM on ``ansible-playbook run.yml`` stops the experiment where it runs, and the play brings its rounds back.

Left to itself, ansible-playbook ends at once on Ctrl-C (exit 99) or SIGTERM, killing the SSH
connection that runs fltest, while fltest runs on in the Ray head or the operator container. While
run.yml's fltest task runs, this plugin takes both signals instead: it starts ``stop.yml`` beside the
play (the same inventory and extra vars; ``fltest_run_fetch_stopped=false``), which sends fltest
SIGINT where it runs, as Ctrl-C in its own terminal would. fltest stops its framework (a Flower run
on the SuperLink too), writes its summary (``interrupted``) and exits 130; the play's own tasks then
bring the results to the controller as after any run. At the end the plugin prints one line saying
what was stopped and ansible-playbook exits 130. A second signal, or one outside fltest's task, is
Ansible's own (it ends the play; ``stop.yml`` stops and rescues what is left).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ansible.plugins.callback import CallbackBase

from ansible import context

DOCUMENTATION = """
name: fltest_interrupt
type: aggregate
short_description: Ctrl-C or SIGTERM on run.yml stops the FLTest experiment where it runs
description:
  - While run.yml runs fltest, SIGINT and SIGTERM start stop.yml beside the play instead of ending ansible-playbook;
    the play then brings the stopped run's results back and ansible-playbook exits 130.
requirements:
  - enabled in ansible.cfg (callbacks_enabled = fltest_interrupt)
"""

RUN_TASKS = ("Run fltest in the head", "Run fltest next to the SuperLink")  # fltest_run's tasks that run fltest
STOPPED_FACT = "fltest_run_stopped_results"  # set by fltest_run's report.yml for a run that exited 130
INTERRUPTED_EXIT_CODE = 130
STOP_WAIT_S = 120.0  # for stop.yml to end, once the play has


class CallbackModule(CallbackBase):
    """Takes SIGINT and SIGTERM while run.yml's fltest task runs, and stops the experiment through stop.yml."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fltest_interrupt"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._playbook_dir: Path | None = None
        self._running_fltest = False
        self._previous: dict[int, object] = {}
        self._signal_name: str | None = None
        self._stop: subprocess.Popen | None = None
        self._stopped: list[tuple[str, object]] = []  # (host, fltest's exit code)
        self._results: str | None = None

    def v2_playbook_on_start(self, playbook) -> None:
        """Take the stop signals (Ansible's own handlers are kept for the other moments)."""
        self._playbook_dir = Path(playbook._basedir)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        """Note whether the task that starts runs fltest."""
        self._running_fltest = task.get_name().endswith(RUN_TASKS)

    def v2_runner_on_ok(self, result) -> None:
        """Note the runs fltest ended, and where report.yml says an interrupted run's results are."""
        self._note(result)

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        """As :meth:`v2_runner_on_ok`."""
        self._note(result)

    def _note(self, result) -> None:
        if result._task.get_name().endswith(RUN_TASKS) and "rc" in result._result:
            self._stopped.append((result._host.get_name(), result._result["rc"]))
        self._results = result._result.get("ansible_facts", {}).get(STOPPED_FACT, self._results)

    def _on_signal(self, signum: int, frame) -> None:
        if not self._running_fltest or self._stop is not None:  # Ansible's own handling: end the play
            previous = self._previous[signum]
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signum, previous)
            os.kill(os.getpid(), signum)
            return
        self._signal_name = signal.Signals(signum).name
        # os.write, not Ansible's display: the main thread may hold the display's lock where the signal landed.
        os.write(
            2,
            f"[fltest] {self._signal_name}: stopping the experiment where it runs (stop.yml); "
            "press Ctrl-C again to abandon it\n".encode(),
        )
        self._stop = subprocess.Popen(
            self._stop_command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def _stop_command(self) -> list[str]:
        """``ansible-playbook stop.yml`` with this play's inventory, extra vars and connection options."""
        args = context.CLIARGS
        command = [sys.argv[0]]
        for source in args.get("inventory") or ():
            command += ["-i", source]
        for extra in args.get("extra_vars") or ():
            command += ["-e", extra]
        options = {
            "private_key_file": "--private-key",
            "remote_user": "--user",
            "connection": "--connection",
            "ssh_common_args": "--ssh-common-args",
            "ssh_extra_args": "--ssh-extra-args",
        }
        command += [arg for key, flag in options.items() if args.get(key) for arg in (flag, str(args[key]))]
        command += ["--vault-password-file=" + path for path in args.get("vault_password_files") or ()]
        return [*command, "-e", "fltest_run_fetch_stopped=false", str(self._playbook_dir / "stop.yml")]

    def v2_playbook_on_stats(self, stats) -> None:
        """After an interruption: say what was stopped and where its results are, and exit 130."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self._signal_name is None:
            return
        try:
            output, _ = self._stop.communicate(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._stop.kill()
            output, _ = self._stop.communicate()
        if self._stop.returncode != 0:
            self._display.display(
                f"[fltest] stop.yml exited {self._stop.returncode}: {output.strip()[-3000:]}", stderr=True
            )
        ran = ", ".join(f"on {host} (it exited {rc})" for host, rc in self._stopped) or "before it started"
        where = f"its rounds so far and summary: {self._results}" if self._results else "no results were brought back"
        self._display.display(
            f"ansible-playbook: interrupted ({self._signal_name}): stopped fltest run {ran}; {where}", stderr=True
        )
        raise SystemExit(INTERRUPTED_EXIT_CODE)
