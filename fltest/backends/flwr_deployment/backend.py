"""Run FLTest's experiment on a Flower deployment: submit the app with ``flwr run``, follow its log (:mod:`.log_stream`)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from fltest.backends.base import Backend, RunJob
from fltest.backends.flwr.unsupported import unsupported
from fltest.backends.flwr_deployment.app_dir import user_module_sources, write_app_dir
from fltest.backends.flwr_deployment.connection import CONNECTION, flwr_json, write_connection
from fltest.backends.flwr_deployment.log_stream import FlowerRunTransport
from fltest.backends.flwr_deployment.readiness import ask_nodes, check_online
from fltest.backends.supervision import Deadlines, follow_run
from fltest.config.runs import FlwrDeploymentRun
from fltest.config.schema import ExperimentConfig
from fltest.errors import FieldError, RunFailed

log = logging.getLogger(__name__)


def _root_certificates(run: FlwrDeploymentRun) -> Path:
    """The CA file the SuperLink's certificate is checked against (absolute once the config is loaded; ``~`` expanded)."""
    return run.options.root_certificates.expanduser()


def _submit(home: Path, app: Path, clients: int, deadlines: Deadlines) -> int:
    """Submit the App with ``flwr run`` while asking whether ``clients`` SuperNodes are online; the run's id.

    Not enough (or too many) online: the submitted run is stopped before it sends a message, and the
    readiness line is raised (:mod:`.readiness`), as it is when ``flwr run`` itself fails.
    """
    nodes = ask_nodes(home)
    try:
        try:
            run_id = int(flwr_json(home, "run", str(app), CONNECTION, timeout=deadlines.startup_s)["run-id"])
        except RunFailed:
            check_online(nodes.answer()["nodes"], clients)  # its line says more than flwr run's
            raise
        try:
            check_online(nodes.answer()["nodes"], clients)
        except RunFailed:
            FlowerRunTransport.stop_run(home, run_id)
            raise
    finally:
        nodes.cancel()
    return run_id


class FlwrDeploymentBackend(Backend):
    """Flower 1.42 deployment: a SuperLink at ``superlink`` (TLS) and the SuperNodes connected to it."""

    framework = "flwr"

    def unsupported(self, config: ExperimentConfig) -> str | None:
        """Why Flower has no implementation of the config's strategy (SCAFFOLD), else ``None``."""
        return unsupported(config.training)

    def check(self, config: ExperimentConfig, run: FlwrDeploymentRun) -> None:
        """Refuse a CA file that is not there, and user modules the app cannot carry (the schema checked the options)."""
        ca = _root_certificates(run)
        try:
            found = ca.is_file()
        except OSError as exc:  # e.g. a folder this user may not enter
            raise FieldError(f"runs.{run.name}.options.root_certificates: {ca}: {exc.strerror}") from None
        if not found:
            raise FieldError(f"runs.{run.name}.options.root_certificates: {ca}: no such file")
        user_module_sources(config)

    def run(self, job: RunJob) -> None:
        """Submit the run, follow it to its end; a failed run raises :class:`RunFailed`, a stop signal stops it on the SuperLink."""
        options = job.run.options
        with tempfile.TemporaryDirectory(prefix="fltest-flwr-") as tmp:
            home = Path(tmp) / "flwr-home"
            write_connection(home, options.superlink, _root_certificates(job.run))
            app = write_app_dir(Path(tmp) / "app", job.config, job.shards, job.initial_params)
            deadlines = Deadlines.of(job.config)
            try:
                run_id = _submit(home, app, job.config.clients, deadlines)
            except RunFailed as exc:
                raise RunFailed(f"SuperLink {options.superlink}: {exc}") from None
            job.progress.note(flower_run_id=run_id, superlink=options.superlink)
            log.info("run %s: Flower run %d submitted to %s", job.run.name, run_id, options.superlink)
            done = follow_run(FlowerRunTransport(home, run_id), job.progress, job.config.training.rounds, deadlines)
            job.progress.note(client_hosts=done["client_hosts"])
