"""Benchmark: from each fault to the run's one clear failure line, and from the recovery command to a ready cluster.

On the Ray compose emulation (head + 2 workers, 1 CPU each) under its own project name, for
each fault in turn: ``fltest-deploy run`` of a short flwr experiment; at round 2 the fault is
injected (a worker killed, a worker cut off the network, the head killed); measured are the
seconds from the fault to the run's failure line on stderr (``run flower failed: ...`` or
``fltest-deploy: error: ...``) and to the run's exit, then the seconds ``fltest-deploy up``
takes to bring the cluster back to ready (it waits for Ray to report every node and CPU).
One line a fault is printed; every figure and line goes to a JSON file.
Needs the images (``fltest-deploy build``); takes about 10 minutes.
Run: ``python bench/faults.py [--json results/bench-faults.json]``.
To add a fault, add a :class:`Fault` to :data:`FAULTS`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import yaml

from deploy.images import IMAGE
from deploy.pki.ray_token import ensure_ray_token
from deploy.ray_emulation.project import WORKER_SERVICE, RayEmulation
from deploy.ray_emulation.readiness import wait_until_ready

PROJECT = "fltest-bench-faults"  # apart from the tests' projects and bench/emulation.py's
SETTINGS = {"FLTEST_IMAGE": IMAGE, "RAY_WORKERS": "2", "RAY_HEAD_CPUS": "1", "RAY_WORKER_CPUS": "1"}
FAULT_ROUND = 2
FAILURE_PREFIXES = ("run flower failed: ", "fltest-deploy: error: ")  # the clear failure lines
RUN_LIMIT_S = 300  # after the fault: a run still going then counts as hung and is stopped
ROUND_TIMEOUT_S = 120  # above the time Ray takes to notice a lost node, so Ray's line comes first
POLL_S = 0.2


@dataclass
class Bench:
    """The emulation the faults hit: the project, an engine client, the environment of its ``fltest-deploy`` calls."""

    project: RayEmulation
    client: docker.DockerClient
    env: dict[str, str]
    victim: object = None  # the container the current fault hit

    def worker(self):
        """The oldest running worker container."""
        return self.project.containers(self.client, WORKER_SERVICE)[0]

    def network(self):
        """The project's cluster network."""
        return self.client.networks.get(f"{self.project.name}_cluster")


@dataclass(frozen=True)
class Fault:
    """One fault: how to inject it at round 2, and what to undo before the recovery command (if anything)."""

    key: str  # the run's name, and the fault's in the JSON file
    name: str
    inject: Callable[[Bench], None]
    undo: Callable[[Bench], None] = lambda bench: None


def _kill_worker(bench: Bench) -> None:
    bench.victim = bench.worker()
    bench.victim.kill()


def _cut_worker(bench: Bench) -> None:
    bench.victim = bench.worker()
    bench.network().disconnect(bench.victim)


def _reconnect_worker(bench: Bench) -> None:
    bench.network().connect(bench.victim)


def _kill_head(bench: Bench) -> None:
    bench.victim = bench.project.head(bench.client)
    bench.victim.kill()


FAULTS = [
    Fault("worker-killed", "worker killed (docker kill)", _kill_worker),
    Fault("worker-cut-off", "worker cut off (docker network disconnect)", _cut_worker, undo=_reconnect_worker),
    Fault("head-killed", "head killed (docker kill)", _kill_head),
]


def _experiment(folder: Path, name: str) -> Path:
    """A flwr-only experiment long enough never to end before the fault: 6 clients, 40 rounds."""
    config = {
        "name": name,
        "dataset": {"source": "digits", "scale": 16.0},
        "partition": {"method": "iid"},
        "clients": 6,
        "training": {"rounds": 40, "local_epochs": 1, "learning_rate": 0.5, "round_timeout_s": ROUND_TIMEOUT_S},
        "total_cpus": 2,
        "runs": [{"name": "flower", "framework": "flwr"}],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _fltest_deploy(bench: Bench, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deploy", *args], env=bench.env, capture_output=True, text=True, timeout=timeout
    )


def _wait_for_round(bench: Bench, name: str, timeout_s: float = 300) -> None:
    """Wait until the staged run ``name`` in the head has written round :data:`FAULT_ROUND`'s metrics."""
    head = bench.project.head(bench.client)
    metrics = f"/var/lib/fltest/work/runs/{name}-*/results/{name}/flower/metrics.jsonl"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = head.exec_run(["sh", "-c", f"cat {metrics}"])
        if found.exit_code == 0 and len(found.output.splitlines()) >= FAULT_ROUND + 1:  # round 0 is the initial model
            return
        time.sleep(0.5)
    raise RuntimeError(f"run {name} did not reach round {FAULT_ROUND} in {timeout_s:.0f} s")


def _failure_line(path: Path) -> str | None:
    lines = path.read_text(errors="replace").splitlines()
    return next((line for line in lines if line.startswith(FAILURE_PREFIXES)), None)


def measure(bench: Bench, fault: Fault, folder: Path) -> dict:
    """Run, inject ``fault`` at round 2, time the failure line, the exit and ``fltest-deploy up`` to ready."""
    name = f"bench-{fault.key}"
    config = _experiment(folder, name)
    stderr_path = folder / f"{name}.stderr"
    with stderr_path.open("w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "deploy", "run", str(config), "--results-dir", str(folder / "results")],
            env=bench.env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    line = failed_s = None
    try:
        _wait_for_round(bench, name)
        start = time.monotonic()
        fault.inject(bench)
        while time.monotonic() - start < RUN_LIMIT_S:
            if line is None and (line := _failure_line(stderr_path)) is not None:
                failed_s = time.monotonic() - start
            if run.poll() is not None:
                break
            time.sleep(POLL_S)
        exit_s = time.monotonic() - start if run.poll() is not None else None
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        fault.undo(bench)
    if line is None and (line := _failure_line(stderr_path)) is not None:  # written just before the exit
        failed_s = exit_s
    start = time.monotonic()
    up = _fltest_deploy(bench, "up", "--timeout", "300")
    ready_s = time.monotonic() - start
    up_lines = (up.stdout.strip() or up.stderr.strip()).splitlines()  # its "ready: ..." line, or why it failed
    return {
        "fault": fault.key,
        "description": fault.name,
        "victim": bench.victim.name,
        "exit_code": run.returncode,
        "failure_s": failed_s,
        "exit_s": exit_s,
        "failure_line": line,
        "up_exit_code": up.returncode,
        "ready_s": ready_s,
        "up_last_line": up_lines[-1] if up_lines else "",
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    """Bring the emulation up, measure each fault, print a line a fault, write the JSON file, remove everything."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", default="results/bench-faults.json", help="file for every figure (default: results/bench-faults.json)"
    )
    args = parser.parse_args()
    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="fltest-bench-faults-") as tmp:
        folder = Path(tmp)
        token = folder / "ray_token"
        ensure_ray_token(token)
        env = {**os.environ, **SETTINGS, "COMPOSE_PROJECT_NAME": PROJECT, "RAY_TOKEN_FILE": str(token)}
        bench = Bench(RayEmulation(name=PROJECT, overrides={**SETTINGS, "RAY_TOKEN_FILE": str(token)}), client, env)
        bench.project.down()  # a bench killed earlier may have left it
        results = []
        try:
            start = time.monotonic()
            bench.project.up(client)
            wait_until_ready(bench.project, client, 300)
            first_up_s = time.monotonic() - start
            print(
                f"{'fault at round ' + str(FAULT_ROUND):44} {'failure line':>12} {'run exit':>9} {'up->ready':>10}  the line"
            )
            for fault in FAULTS:
                result = measure(bench, fault, folder)
                results.append(result)
                print(
                    f"{fault.name:44} {_seconds(result['failure_s']):>11}s {_seconds(result['exit_s']):>8}s "
                    f"{_seconds(result['ready_s']):>9}s  {result['failure_line'] or '(none; exit ' + str(result['exit_code']) + ')'}"
                )
        finally:
            _fltest_deploy(bench, "down", "--results-dir", str(folder / "rescued"))
            left = bench.project.leftovers(client)
    print(f"{'first up -> ready':44} {first_up_s:>11.1f}s")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "project": PROJECT,
                "settings": SETTINGS,
                "fault_round": FAULT_ROUND,
                "first_up_s": first_up_s,
                "faults": results,
                "left_after_down": left,
            },
            indent=2,
        )
    )
    print(f"written: {args.json}" + (f"; LEFT after down: {', '.join(left)}" if left else ""))


if __name__ == "__main__":
    main()
