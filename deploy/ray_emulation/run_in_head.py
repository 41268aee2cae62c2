"""Run ``fltest run <config>`` inside the head container and bring its results back to the host.

The config's folder (the config, its hooks module, a ``disk`` dataset beside it) is copied to
``/var/lib/fltest/work/runs/<id>/`` in the head. That folder is a volume every node mounts at
the same path, so Ray workers import the hooks from the driver's ``sys.path``. The results are
copied back into ``<results_dir>/<experiment>/`` on the host whatever the run's end (a stopped
head too), and the staged folder is removed once the head has nothing more of its own.
"""

from __future__ import annotations

import io
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

from docker import errors as docker_errors
from requests.exceptions import RequestException

from deploy.kit import KIT
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError, RunFailed

WORK_DIR = PurePosixPath(KIT.work_dir) / "runs"


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


def _stream_run(head, command: list[str]) -> int | None:
    """Run ``command`` in ``head`` as the container user, its output streamed here; its exit code, ``None`` if cut off."""
    try:
        exec_id = head.client.api.exec_create(head.id, command, user=str(KIT.uid))["Id"]
        for chunk in head.client.api.exec_start(exec_id, stream=True):
            sys.stderr.write(chunk.decode(errors="replace"))
            sys.stderr.flush()
        return head.client.api.exec_inspect(exec_id)["ExitCode"]
    except (docker_errors.APIError, ConnectionError, OSError):  # the head went away under the stream
        return None


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
    are, on the host, or, when the head container is gone, in the work volume.
    """
    run_id = f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    staged = WORK_DIR / run_id
    folder = config_path.resolve().parent
    head.exec_run(["mkdir", "-p", str(WORK_DIR)])
    if not head.put_archive(str(WORK_DIR), _tar_folder(folder, run_id)):
        raise InputError(f"{config_path}: could not copy the config folder into {head.name}")
    command = ["fltest", "run", str(staged / config_path.name), "--results-dir", str(staged / "results")]
    print(f"[run] {head.name}: {' '.join(command)}", file=sys.stderr, flush=True)
    exit_code = _stream_run(head, command)
    ended = _head_state(head, settle_s=0.0 if exit_code is not None and exit_code < 128 else 10.0)  # killed: 128 + signal
    results = staged / "results" / config.name
    try:
        copied = ended != "removed" and _extract_results(head, results, results_dir / config.name)
    except (docker_errors.APIError, tarfile.TarError, OSError) as exc:
        copied, ended = False, f"{ended or 'running'}; copying its results failed: {exc}"
    if ended is None:
        try:
            head.exec_run(["rm", "-rf", str(staged)])  # on the host now; a head that stopped keeps its copy
        except docker_errors.APIError:
            ended = _head_state(head) or "stopping"
    if ended is not None or exit_code is None:
        where = (f"partial results copied to {results_dir / config.name}" if copied
                 else f"no results copied; they stay in the work volume at runs/{run_id}/results")  # fmt: skip
        raise RunFailed(f"{head.name} stopped during the run ({ended or 'its output stream broke'}): {where}")
    if copied:
        print(f"[run] results: {results_dir / config.name}", file=sys.stderr, flush=True)
    return exit_code


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
            members = [m for m in tar.getmembers() if len(Path(m.name).parts) >= 3 and Path(m.name).parts[2] == "results"]
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
