"""``fltest-deploy logs [node]``: a node container's own log and its Ray logs, read through the engine.

Ray writes its logs in the container, under ``/tmp/ray/session_latest/logs``; they are copied
out with the engine's archive API, which works on a stopped container too (a node that died or
refused to start still shows why).
"""

from __future__ import annotations

import io
import sys
import tarfile
from typing import TextIO

from deploy.ray_emulation.project import RAY_TEMP
from fltest.errors import InputError

RAY_LOG_DIR = f"{RAY_TEMP}/session_latest/logs"
#: The Ray logs shown by default: the node's raylet, the head's GCS, Ray's own record of exits.
KEY_LOGS = ("raylet.err", "raylet.out", "gcs_server.err", "gcs_server.out", "ray_process_exit.log")


def select_nodes(containers: list, node: str | None) -> list:
    """The containers ``node`` names: a full name, a service (``ray-head``), or a name's end; all if ``None``.

    A name's end matches with ``-`` and ``_`` alike (``ray-worker-1`` and ``ray-worker_1``), as
    docker-compose 1.29 names containers ``<project>_ray-worker_1`` and compose v2 ``<project>-ray-worker-1``.
    """
    if node is None:
        return containers
    exact = [c for c in containers if c.name == node]
    chosen = exact or [
        c
        for c in containers
        if c.labels.get("com.docker.compose.service") == node or _dashed(c.name).endswith(_dashed(node))
    ]
    if not chosen:
        known = ", ".join(c.name for c in containers) or "none"
        raise InputError(f"node {node}: no such container in the project (containers: {known})")
    return chosen


def _dashed(name: str) -> str:
    """``name`` with ``_`` written as ``-``: compose v1 and v2 container names compare equal."""
    return name.replace("_", "-")


def ray_logs(container) -> dict[str, bytes]:
    """The files of the container's Ray log folder, by name; ``{}`` when Ray never wrote one."""
    try:
        chunks, _ = container.get_archive(RAY_LOG_DIR)
    except Exception:  # docker.errors.NotFound: Ray never started in this container
        return {}
    logs = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        for member in tar.getmembers():
            if member.isfile():
                logs[member.name.split("/", 1)[-1]] = tar.extractfile(member).read()
    return logs


def _tail(data: bytes, lines: int) -> list[str]:
    """The last ``lines`` lines of ``data``, decoded, without the raylet's periodic state dumps."""
    text = [line for line in data.decode(errors="replace").splitlines() if not line.startswith("[state-dump]")]
    return text[-lines:]


def print_node_logs(container, lines: int, files: list[str] | None = None, out: TextIO = sys.stdout) -> None:
    """Print the container's log and the tail of its Ray logs (``files``, else :data:`KEY_LOGS`), each under a heading."""
    container.reload()
    state = container.attrs["State"]
    print(
        f"== {container.name} ({container.status}, exit code {state.get('ExitCode')}): container log, last {lines} lines",
        file=out,
    )
    print("\n".join(_tail(container.logs(), lines)), file=out)
    logs = ray_logs(container)
    if not logs:
        print(f"== {container.name}: no Ray logs ({RAY_LOG_DIR} is missing: Ray did not start here)", file=out)
        return
    sizes = ", ".join(f"{name} ({len(data)} B)" for name, data in sorted(logs.items()) if data)
    print(f"== {container.name}: Ray logs in {RAY_LOG_DIR}: {sizes}", file=out)
    for name in files or [n for n in KEY_LOGS if logs.get(n)]:
        if name not in logs:
            raise InputError(f"{container.name}: no Ray log {name} in {RAY_LOG_DIR}")
        print(f"== {container.name}: {RAY_LOG_DIR}/{name}, last {lines} lines", file=out)
        print("\n".join(_tail(logs[name], lines)), file=out)
