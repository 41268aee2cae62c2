"""The runs of the Flower emulation: the operator's one-off containers, the Flower runs on the SuperLink, and stopping them.

``fltest-flower run`` runs ``fltest run`` in a one-off ``operator`` container of the SuperLink's
namespace. One experiment at a time: an operator container still running (its host command was
killed outright) refuses the next run, naming it. Stopping it is SIGINT to the container, whose
init hands it to fltest, which stops its Flower run on the SuperLink (``flwr stop``), records the
rounds so far with a summary saying ``interrupted`` and exits 130. A Flower run left unfinished
after that (an operator killed outright) is stopped with ``flwr stop`` in the SuperLink's container.
``fltest-flower flwr`` runs the operator's ``flwr`` in a one-off ``flwr`` container there: any Flower
App's runs, which the SuperLink lists and stops as fltest's own.

After a Flower run was stopped the SuperNodes are restarted (:func:`restart_supernodes`): a Flower
1.42 SuperNode that is receiving a message when its run stops keeps that message, answers it, and
from then on sends every reply one message late, so the next run's first question goes unanswered.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from deploy.compose import SERVICE_LABEL
from deploy.flower_emulation.federation import OPERATOR_SERVICE, FlowerFederation
from deploy.node.runs import STOP_TIMEOUT_S
from fltest.backends.flwr_deployment.connection import CONNECTION
from fltest.config.runs import FlwrDeploymentRun
from fltest.config.schema import ExperimentConfig
from fltest.errors import FLTestError, RunFailed

SUPERNODE_RESTART_TIMEOUT_S = 10  # a SuperNode's stop on SIGTERM, before Docker kills it
ONLINE_WAIT_S = 120.0  # for the restarted SuperNodes to be online again
FINISHED = "finished"  # a Flower run's status once it ended: finished:completed, finished:stopped, finished:failed
OPERATOR_FLWR = [
    "python",
    "-m",
    "deploy.node.superlink_flwr",
]  # the command of a `flwr` container, before flwr's arguments
COMPOSE_END_WAIT_S = 15.0  # for compose to create its one-off container, or to end (and remove it) once it stopped


def running_operators(federation: FlowerFederation, service: str = OPERATOR_SERVICE) -> list:
    """The one-off containers of ``service`` (``operator``: fltest runs; ``flwr``: the operator's flwr) that still run, oldest first."""
    return federation.containers(federation.docker(), service)


def describe_operator(container) -> str:
    """An operator container as error lines name it: its name and its command (``flwr ...`` for the operator's flwr)."""
    command = container.attrs["Config"]["Cmd"] or []
    command = ["flwr", *command[len(OPERATOR_FLWR) :]] if command[: len(OPERATOR_FLWR)] == OPERATOR_FLWR else command
    return f"container {container.name} ({' '.join(command)})"


def container_of(federation: FlowerFederation, name: str, compose: subprocess.Popen):
    """The one-off container ``name`` that ``compose`` runs; ``None`` once compose has ended without one.

    A stop signal may come while compose still creates the container: it is waited for (compose, in a
    session of its own, goes on creating and starting it), up to :data:`COMPOSE_END_WAIT_S`.
    """
    import docker.errors

    deadline = time.monotonic() + COMPOSE_END_WAIT_S
    while True:
        try:
            return federation.docker().containers.get(name)
        except docker.errors.NotFound:
            if compose.poll() is not None or time.monotonic() > deadline:
                return None
            time.sleep(0.2)


def refuse_if_running(federation: FlowerFederation) -> None:
    """One line naming the operator container still running, and how to stop it; nothing if none is."""
    going_on = running_operators(federation)
    if going_on:
        raise FLTestError(
            f"an experiment still runs next to the SuperLink: {describe_operator(going_on[0])}; "
            "stop it with: fltest-flower stop"
        )


def stop_operator(container, timeout_s: float = STOP_TIMEOUT_S) -> str:
    """SIGINT ``container`` (fltest in it stops its run, as on Ctrl-C); kill it after ``timeout_s``; ``stopped`` or ``killed``."""
    import docker.errors
    from requests.exceptions import RequestException

    try:
        container.kill(signal="SIGINT")
        container.wait(timeout=timeout_s)
        outcome = "stopped"
    except docker.errors.NotFound:
        return "stopped"
    except (docker.errors.APIError, RequestException):  # still running after timeout_s (or it went meanwhile)
        outcome = "killed"
        try:
            container.kill()
        except docker.errors.APIError:
            pass
    try:
        container.remove(force=True)  # compose run --rm removes it too, when its own process is still there
    except docker.errors.APIError:
        pass
    return outcome


def flower_run_status(federation: FlowerFederation, run_id: int) -> str:
    """Flower run ``run_id``'s status on the SuperLink (``running``, ``finished:stopped``, ...)."""
    runs = federation.flwr("ls", CONNECTION, "--run-id", str(run_id))["runs"]
    return str(runs[0].get("status", "unknown")) if runs else "unknown"


def flower_runs(federation: FlowerFederation) -> list[dict]:
    """Every Flower run the SuperLink knows (fltest's and any other App's), as ``flwr ls`` lists them, oldest first."""
    return sorted(federation.flwr("ls", CONNECTION)["runs"], key=lambda run: str(run.get("pending-at", "")))


def describe_flower_run(run: dict) -> str:
    """One Flower run as ``fltest-flower list`` shows it: ``run <id>  <status>  <App id> <version>  <seconds> s``."""
    return (
        f"run {run['run-id']:>20}  {run.get('status', '?'):20}  {run.get('fab-id', '?')} {run.get('fab-version', '')}  "
        f"{float(run.get('elapsed') or 0):.1f} s"
    )


def unfinished_flower_runs(federation: FlowerFederation) -> list[int]:
    """The Flower runs on the SuperLink that have not finished (pending, starting, running)."""
    return [
        int(run["run-id"]) for run in flower_runs(federation) if not str(run.get("status", "")).startswith(FINISHED)
    ]


def stop_flower_runs(federation: FlowerFederation, run_ids: list[int]) -> list[int]:
    """``flwr stop`` each of ``run_ids`` still unfinished on the SuperLink; returns those it stopped."""
    stopped = []
    for run_id in run_ids:
        if not flower_run_status(federation, run_id).startswith(FINISHED):
            try:
                federation.flwr("stop", str(run_id), CONNECTION)
            except RunFailed:  # it finished meanwhile
                continue
            stopped.append(run_id)
    return stopped


def flower_runs_of(config: ExperimentConfig, results: Path) -> list[int]:
    """The Flower run ids an experiment's deployment runs submitted, as their summaries in ``results`` record them."""
    run_ids = []
    for run in config.runs:
        summary = results / config.name / run.name / "summary.json"
        if isinstance(run, FlwrDeploymentRun) and summary.is_file():
            run_id = json.loads(summary.read_text()).get("flower_run_id")
            if run_id is not None:
                run_ids.append(int(run_id))
    return run_ids


def restart_supernodes(federation: FlowerFederation, timeout_s: float = ONLINE_WAIT_S) -> list[str]:
    """Restart every SuperNode that runs, at once, and wait until the SuperLink lists each online again; their names.

    Why (Flower 1.42, ``flwr/supernode/start_client_internal.py``): a SuperNode receiving a message as its
    run stops stores the message and its task, then drops out of the receive (``RunNotRunningException``)
    without removing them; its ClientApp answers it later, the next send takes that stale answer, and
    every later answer goes one message late: the next run's first question is never answered (seen here
    after one stop in three: ``1 of 2 clients answered within 180 s``). A restart empties the node's state;
    it comes back under its node id.
    """
    node_ids = federation.node_ids()
    running = [c for node in node_ids for c in federation.containers(federation.docker(), node)]
    restarts = [threading.Thread(target=c.restart, kwargs={"timeout": SUPERNODE_RESTART_TIMEOUT_S}) for c in running]
    for thread in restarts:
        thread.start()
    for thread in restarts:
        thread.join()
    federation.wait_online([node_ids[c.labels[SERVICE_LABEL]] for c in running], timeout_s)
    return [c.name for c in running]
