"""Run ``fltest run <config>`` inside the head container and bring its results back to the host.

The config's folder (the config, its hooks module, a ``disk`` dataset beside it) is copied to
``/var/lib/fltest/work/runs/<id>/`` in the head. That folder is a volume every node mounts at
the same path, so Ray workers import the hooks from the driver's ``sys.path``. The results are
copied back into ``<results_dir>/<experiment>/`` on the host whatever the run's end (a stopped
head too), and the staged folder is removed once the head has nothing more of its own.

One experiment at a time: a run still going on in the head (its host command killed outright)
refuses the next one, naming it; ``fltest-deploy stop`` and ``down`` stop it
(:mod:`deploy.node.runs`, SIGINT as Ctrl-C) and rescue its results. Ctrl-C or SIGTERM on
``fltest-deploy run`` stops the run in the head the same way, then copies its results back.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath

from docker import errors as docker_errors
from requests.exceptions import RequestException

from deploy.kit import KIT
from deploy.node.runs import STOP_TIMEOUT_S
from fltest.config.schema import ExperimentConfig
from fltest.errors import FLTestError, InputError, RunFailed

WORK_DIR = PurePosixPath(KIT.work_dir) / "runs"
STREAM_END_WAIT_S = 10.0  # for the run's output to end once its process did


def _tar_folder(folder: Path, arcname: str) -> bytes:
    """A tar of ``folder`` under ``arcname``, every member owned by the container user."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in Path(info.name).parts:
            return None
        info.uid = info.gid = KIT.uid
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=arcname, filter=owned)
    return buffer.getvalue()


def _extract_results(head, source: PurePosixPath, destination: Path) -> bool:
    """Copy ``source`` (a folder in the head, running or stopped) to ``destination`` on the host; ``False`` if absent."""
    try:
        chunks, _ = head.get_archive(str(source))
        buffer = io.BytesIO(b"".join(chunks))
    except docker_errors.NotFound:
        return False
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buffer) as tar:
        tar.extractall(destination.parent, filter="data")
    return True


class StreamedRun:
    """``command`` run in ``head`` as the container user, its output relayed to stderr from a thread of its own.

    The main thread stays free to take Ctrl-C or SIGTERM while the run goes on.
    """

    def __init__(self, head, command: list[str]) -> None:
        """Start ``command`` in ``head``."""
        self.head = head
        self.exit_code: int | None = None  # None: still running, or its output stream broke
        self._exec_id = head.client.api.exec_create(head.id, command, user=str(KIT.uid))["Id"]
        self._thread = threading.Thread(target=self._relay, name="fltest-deploy-run", daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        try:
            for chunk in self.head.client.api.exec_start(self._exec_id, stream=True):
                sys.stderr.write(chunk.decode(errors="replace"))
                sys.stderr.flush()
            self.exit_code = self.head.client.api.exec_inspect(self._exec_id)["ExitCode"]
        except (docker_errors.APIError, ConnectionError, OSError):  # the head went away under the stream
            self.exit_code = None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the output to end (up to ``timeout_s``); whether it has."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def exec_json(container, command: list[str]) -> object:
    """The JSON that ``command``, run in ``container`` as the container user, prints last; one line naming the container if it fails."""
    try:
        result = container.exec_run(command, user=str(KIT.uid), demux=True)
    except docker_errors.APIError as exc:
        raise FLTestError(f"{container.name}: {' '.join(command[:4])}: {exc.explanation}") from None
    out, err = result.output
    if result.exit_code != 0:
        lines = (err or out or b"").decode(errors="replace").strip().splitlines()
        raise FLTestError(
            f"{container.name}: {' '.join(command[:4])} exited {result.exit_code}: {lines[-1] if lines else ''}"
        )
    return json.loads((out or b"[]").decode().strip().splitlines()[-1])


def runs_in(head) -> list[dict]:
    """The ``fltest run`` processes going on in ``head`` (:mod:`deploy.node.runs`)."""
    return exec_json(head, ["python", "-m", "deploy.node.runs", "list"])  # type: ignore[return-value]


def stop_runs_in(head, run_id: str | None = None) -> list[dict]:
    """Stop the ``fltest run`` processes in ``head`` (only ``run_id``'s if given) as Ctrl-C does; returns them, each with its outcome."""
    command = ["python", "-m", "deploy.node.runs", "stop", "--timeout", f"{STOP_TIMEOUT_S:g}"]
    return exec_json(head, command + (["--run-id", run_id] if run_id else []))  # type: ignore[return-value]


def describe_run(run: dict) -> str:
    """A run in the head as error lines name it: its staged folder, its pid, since when."""
    return f"fltest run of runs/{run['run_id']} (pid {run['pid']}, since {time.strftime('%H:%M:%S', time.localtime(run['started']))})"


def refuse_if_running(head) -> None:
    """One line naming the run still going on in ``head``, and how to stop it; nothing if none is."""
    going_on = runs_in(head)
    if going_on:
        raise FLTestError(
            f"{head.name} still runs an experiment: {describe_run(going_on[0])}; stop it and bring its results "
            "back with: fltest-deploy stop"
        )


def _head_state(head, settle_s: float = 0.0) -> str | None:
    """``None`` while the head runs, else how it ended (``exited, exit code 137``, ``removed``).

    ``settle_s``: how long to let a head that is being killed finish stopping (the run's output
    ends before the engine marks the container stopped).
    """
    if settle_s:
        try:
            head.wait(timeout=settle_s)
        except (docker_errors.DockerException, RequestException):  # still running after settle_s, or gone
            pass
    try:
        head.reload()
    except docker_errors.NotFound:
        return "removed"
    if head.status == "running":
        return None
    return f"{head.status}, exit code {head.attrs['State'].get('ExitCode')}"


def run_in_head(head, config_path: Path, config: ExperimentConfig, results_dir: Path) -> int:
    """Stage the config (checked on the host: see :func:`fltest.config.load_config`), run fltest in
    ``head`` with its output streamed here, copy the results back; returns fltest's exit code.

    The results are copied back whatever the run's end: a head that stops during the run (killed,
    crashed) raises :class:`RunFailed` with one line saying where the results it had written
    are, on the host, or, when the head container is gone, in the work volume. Ctrl-C or SIGTERM
    (:class:`~fltest.interrupts.Interrupted`) stops the run in the head first, then copies.
    """
    refuse_if_running(head)
    run_id = f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    staged = WORK_DIR / run_id
    folder = config_path.resolve().parent
    head.exec_run(["mkdir", "-p", str(WORK_DIR)])
    if not head.put_archive(str(WORK_DIR), _tar_folder(folder, run_id)):
        raise InputError(f"{config_path}: could not copy the config folder into {head.name}")
    command = ["fltest", "run", str(staged / config_path.name), "--results-dir", str(staged / "results")]
    print(f"[run] {head.name}: {' '.join(command)}", file=sys.stderr, flush=True)
    run = StreamedRun(head, command)
    try:
        run.wait()
    except (
        KeyboardInterrupt
    ) as interrupt:  # Ctrl-C or SIGTERM here: stop the run where it runs, then bring back what it made
        stopped = stop_runs_in(head, run_id)
        run.wait(STREAM_END_WAIT_S)
        copied, _ = _bring_back(head, staged, config, results_dir, _head_state(head))
        outcome = stopped[0]["outcome"] if stopped else "had ended"
        where = f"its rounds so far and summary: {results_dir / config.name}" if copied else "no results to copy back"
        interrupt.stopped = f"fltest run in {head.name} (runs/{run_id}) {outcome}; {where}"
        raise
    exit_code = run.exit_code
    ended = _head_state(
        head, settle_s=0.0 if exit_code is not None and exit_code < 128 else 10.0
    )  # killed: 128 + signal
    copied, ended = _bring_back(head, staged, config, results_dir, ended)
    if ended is not None or exit_code is None:
        where = (
            f"partial results copied to {results_dir / config.name}"
            if copied
            else f"no results copied; they stay in the work volume at runs/{run_id}/results"
        )
        raise RunFailed(f"{head.name} stopped during the run ({ended or 'its output stream broke'}): {where}")
    if copied:
        print(f"[run] results: {results_dir / config.name}", file=sys.stderr, flush=True)
    return exit_code


def _bring_back(
    head, staged: PurePosixPath, config: ExperimentConfig, results_dir: Path, ended: str | None
) -> tuple[bool, str | None]:
    """Copy the staged run's results to ``results_dir`` and, while the head runs, remove the staged folder.

    Returns whether any results were copied, and how the head ended (``ended``, or a copy that failed).
    """
    try:
        copied = ended != "removed" and _extract_results(
            head, staged / "results" / config.name, results_dir / config.name
        )
    except (docker_errors.APIError, tarfile.TarError, OSError) as exc:
        return False, f"{ended or 'running'}; copying its results failed: {exc}"
    if ended is None:
        try:
            head.exec_run(["rm", "-rf", str(staged)])  # on the host now; a head that stopped keeps its copy
        except docker_errors.APIError:
            ended = _head_state(head) or "stopping"
    return copied, ended


def rescue_staged_results(containers: list, results_dir: Path) -> list[Path]:
    """Copy the results every staged run left in the work volume to ``<results_dir>/<run id>/``; returns those folders.

    ``containers``: the project's node containers, running or stopped (every node mounts the
    volume at the same path); the first that has the folder is read. Used before ``down``
    removes the volume, so that the results of a run cut short are never deleted with it.
    """
    for container in containers:
        try:
            chunks, _ = container.get_archive(str(WORK_DIR))
        except docker_errors.NotFound:
            continue
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            members = [
                m for m in tar.getmembers() if len(Path(m.name).parts) >= 3 and Path(m.name).parts[2] == "results"
            ]
            run_ids = sorted({Path(m.name).parts[1] for m in members})
            rescued = []
            for run_id in run_ids:
                target = results_dir / run_id
                for member in members:
                    parts = Path(member.name).parts
                    if parts[1] == run_id and len(parts) > 3:
                        member.name = str(Path(*parts[3:]))
                        tar.extract(member, target, filter="data")
                rescued.append(target)
        return rescued
    return []


def remove_staged(head, run_ids: list[str]) -> None:
    """Remove the staged folders of ``run_ids`` from the work volume (their results are on the host)."""
    if run_ids:
        head.exec_run(["rm", "-rf", *(str(WORK_DIR / run_id) for run_id in run_ids)], user=str(KIT.uid))
