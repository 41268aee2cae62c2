"""Run FLTest's experiment on a Flower deployment: submit the app with ``flwr run``, follow its log."""

from __future__ import annotations

import logging
import re
import subprocess
import tempfile
import threading
from pathlib import Path

from fltest.backends.base import STARTUP_S, Backend, RunJob
from fltest.backends.flwr.strategy import unsupported
from fltest.backends.flwr.time_limit import REPLY_GRACE_S
from fltest.backends.flwr_deployment import channel
from fltest.backends.flwr_deployment.app_dir import user_module_sources, write_app_dir
from fltest.backends.flwr_deployment.connection import CONNECTION, flwr_cli, flwr_env, flwr_json, write_connection
from fltest.backends.flwr_deployment.readiness import check_online
from fltest.config.runs import FlwrDeploymentRun
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError, RunFailed

log = logging.getLogger(__name__)

_EXCEPTION_LINE = re.compile(r"^\w*(Error|Exception)\b.*: ")  # a traceback's last line, e.g. from the ServerApp


def _root_certificates(run: FlwrDeploymentRun) -> Path:
    """The CA file the SuperLink's certificate is checked against (``~`` expanded)."""
    return run.options.root_certificates.expanduser()


class FlwrDeploymentBackend(Backend):
    """Flower 1.42 deployment: a SuperLink at ``superlink`` (TLS) and the SuperNodes connected to it."""

    framework = "flwr"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why Flower has no implementation of the config's strategy (SCAFFOLD), else ``None``."""
        return unsupported(config.training.strategy)

    def check(self, config: ExperimentConfig, run: FlwrDeploymentRun) -> None:
        """Refuse a CA file that is not there, and user modules the app cannot carry (the schema checked the options)."""
        ca = _root_certificates(run)
        try:
            found = ca.is_file()
        except OSError as exc:  # e.g. a folder this user may not enter
            raise InputError(f"runs.{run.name}.options.root_certificates: {ca}: {exc.strerror}") from None
        if not found:
            raise InputError(f"runs.{run.name}.options.root_certificates: {ca}: no such file")
        user_module_sources(config)

    def run(self, job: RunJob) -> None:
        """Submit the run, report each round as its line arrives; a failed run raises :class:`RunFailed`."""
        options, training = job.run.options, job.config.training
        deadline = STARTUP_S + training.rounds * (training.round_timeout_s + REPLY_GRACE_S)  # as long as the ServerApp waits
        with tempfile.TemporaryDirectory(prefix="fltest-flwr-") as tmp:
            home = Path(tmp) / "flwr-home"
            write_connection(home, options.superlink, _root_certificates(job.run))
            app = write_app_dir(Path(tmp) / "app", job.config, job.shards)
            try:
                check_online(home, job.config.clients)
                run_id = int(flwr_json(home, "run", str(app), CONNECTION, timeout=STARTUP_S)["run-id"])
            except RunFailed as exc:
                raise RunFailed(f"SuperLink {options.superlink}: {exc}") from None
            job.progress.note(flower_run_id=run_id, superlink=options.superlink)
            log.info("run %s: Flower run %d submitted to %s", job.run.name, run_id, options.superlink)
            self._follow(job, home, run_id, deadline)

    def _follow(self, job: RunJob, home: Path, run_id: int, timeout: float) -> None:
        """Read the run's log stream until it ends, reporting rounds; then check the run's status."""
        command = [flwr_cli(), "log", str(run_id), CONNECTION, "--stream"]
        stream = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=flwr_env(home))
        timed_out = threading.Event()
        timer = threading.Timer(timeout, lambda: (timed_out.set(), stream.kill()))
        timer.start()
        done, error, rounds, last_exception = None, None, 0, ""
        try:
            for line in stream.stdout:
                parsed = channel.parse_line(line)
                if parsed is None:
                    last_exception = line.strip() if _EXCEPTION_LINE.match(line) else last_exception
                    continue
                kind, payload = parsed
                if kind == "ROUND":
                    if rounds == 0:
                        job.progress.setup_done()
                    job.progress.round_done(payload)
                    rounds = payload.server_round
                elif kind == "DONE":
                    done = payload
                else:
                    error = payload["reason"]
        except BaseException:  # interrupted, or a round that cannot be recorded: end the remote run too
            self._stop(home, run_id)
            raise
        finally:
            timer.cancel()
            if stream.poll() is None:
                stream.kill()
            stream.wait()
        if error:
            raise RunFailed(f"Flower run {run_id}: {error}")
        if done is None:
            status = self._status(home, run_id)
            if timed_out.is_set():
                self._stop(home, run_id)
                raise RunFailed(f"Flower run {run_id}: no end after {timeout:.0f} s ({status}, {rounds} rounds); stopped")
            reason = f": {last_exception}" if last_exception else ""
            raise RunFailed(f"Flower run {run_id} ended ({status}) after {rounds} of {job.config.training.rounds} rounds{reason}")
        job.progress.note(client_hosts=done["client_hosts"])

    @staticmethod
    def _status(home: Path, run_id: int) -> str:
        """The run's status as ``flwr ls`` reports it (``finished:completed``, ``running``, ...)."""
        runs = flwr_json(home, "ls", CONNECTION, "--run-id", str(run_id))["runs"]
        return str(runs[0].get("status", "unknown")) if runs else "unknown"

    @staticmethod
    def _stop(home: Path, run_id: int) -> None:
        """Ask the SuperLink to stop the run (best effort: a run that already ended is fine)."""
        try:
            flwr_json(home, "stop", str(run_id), CONNECTION)
        except RunFailed as exc:
            log.warning("%s", exc)
