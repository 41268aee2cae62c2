"""Run ``fltest run <config>`` inside the head container and bring its results back to the host.

The config's folder (the config, its hooks module, a ``disk`` dataset beside it) is copied to
``/var/lib/fltest/work/runs/<id>/`` in the head. That folder is a volume every node mounts at
the same path, so Ray workers import the hooks from the driver's ``sys.path``. The results are
copied back into ``<results_dir>/<experiment>/`` on the host, and the staged folder is removed.
"""

from __future__ import annotations

import io
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

from deploy.secrets import CONTAINER_UID
from fltest.config.schema import ExperimentConfig
from fltest.errors import InputError

WORK_DIR = PurePosixPath("/var/lib/fltest/work/runs")


def _tar_folder(folder: Path, arcname: str) -> bytes:
    """A tar of ``folder`` under ``arcname``, every member owned by the container user."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in Path(info.name).parts:
            return None
        info.uid = info.gid = CONTAINER_UID
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=arcname, filter=owned)
    return buffer.getvalue()


def _extract_results(head, source: PurePosixPath, destination: Path) -> None:
    """Copy ``source`` (a folder in the head) to ``destination`` on the host."""
    chunks, _ = head.get_archive(str(source))
    buffer = io.BytesIO(b"".join(chunks))
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buffer) as tar:
        tar.extractall(destination.parent, filter="data")


def run_in_head(head, config_path: Path, config: ExperimentConfig, results_dir: Path) -> int:
    """Stage the config (checked on the host: see :func:`fltest.config.load_config`), run fltest in
    ``head`` with its output streamed here, copy the results back; returns fltest's exit code."""
    run_id = f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    staged = WORK_DIR / run_id
    folder = config_path.resolve().parent
    head.exec_run(["mkdir", "-p", str(WORK_DIR)])
    if not head.put_archive(str(WORK_DIR), _tar_folder(folder, run_id)):
        raise InputError(f"{config_path}: could not copy the config folder into {head.name}")
    command = ["fltest", "run", str(staged / config_path.name), "--results-dir", str(staged / "results")]
    print(f"[run] {head.name}: {' '.join(command)}", file=sys.stderr, flush=True)
    try:
        exec_id = head.client.api.exec_create(head.id, command, user=str(CONTAINER_UID))["Id"]
        for chunk in head.client.api.exec_start(exec_id, stream=True):
            sys.stderr.write(chunk.decode(errors="replace"))
            sys.stderr.flush()
        exit_code = head.client.api.exec_inspect(exec_id)["ExitCode"]
        results = staged / "results" / config.name
        if head.exec_run(["test", "-d", str(results)]).exit_code == 0:
            _extract_results(head, results, results_dir / config.name)
            print(f"[run] results: {results_dir / config.name}", file=sys.stderr, flush=True)
        return exit_code
    finally:
        head.exec_run(["rm", "-rf", str(staged)])

