"""docs/tutorials/first-cluster.md as a newcomer follows it: each block as written, in the page's order, from a
copy of the checkout (tests/doc_blocks.py), against the real engine; and upgrading.md's blocks for the emulation.

The pages' commands name no project, so they run the default compose projects (``fltest``, ``fltest-flower``):
where a developer's own emulation holds them, the tests skip (CI's engine starts empty). The kit's files go to the
copy's ``compose/secrets/`` and ``compose/.generated/``, which the page's relative paths (the dashboard's token,
the example's CA) then find.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

import pytest
import requests

from deploy.flower_emulation.federation import FlowerFederation
from deploy.images import IMAGE
from deploy.kit import KIT
from deploy.ray_emulation.project import HEAD_SERVICE, WORKER_SERVICE, RayEmulation, started_at
from tests.conformance import TOLERANCE
from tests.doc_blocks import block_steps, doc_block, run_block, user_checkout
from tests.docker.hardening import assert_hardened
from tests.network import host_addresses

pytestmark = pytest.mark.docker

DASHBOARD = "http://127.0.0.1:8265/api/jobs/"  # the page's: compose/.env's RAY_DASHBOARD_PORT
BLOCK_TIMEOUT_S = 900  # a block's commands together, on a loaded host (each command has its own bound too)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The repository's folder as a user has it after the install (a copy of the checkout's files)."""
    return user_checkout(tmp_path_factory.mktemp("page") / "fltest")


@pytest.fixture(scope="module")
def default_projects(docker_client):
    """The default compose projects the pages' commands use, when nothing holds them yet (else the test skips)."""
    held = [
        project.name
        for project in (RayEmulation(), FlowerFederation(client=docker_client))
        if project.leftovers(docker_client)
    ]
    if held:
        pytest.skip(
            f"the pages' commands use the default compose projects, and {', '.join(held)} holds containers here"
        )


def _ray_settings(folder) -> dict[str, str]:
    return {"RAY_TOKEN_FILE": str(folder / "compose" / "secrets" / "ray_token")}


def _flower_settings(folder) -> dict[str, str]:
    compose = folder / "compose"
    return {
        "FLOWER_TLS_DIR": str(compose / "secrets" / "flower" / "tls"),
        "FLOWER_KEYS_DIR": str(compose / "secrets" / "flower" / "keys"),
        "FLOWER_DATA_DIR": str(compose / ".generated" / "partitions"),
        "FLOWER_GENERATED_DIR": str(compose / ".generated"),
    }


def _difference_from_reference(experiment, run: str) -> float:
    """The run's largest parameter difference from the reference over every round (comparison.json: the examples
    keep no round models)."""
    comparison = json.loads((experiment / "comparison.json").read_text())
    row = next(row for row in comparison["runs"] if row["run"] == run)
    assert len(row["param_diff_per_round"]) == row["rounds_completed"], row  # every round compared
    return max(row["max_param_diff_vs_reference"], *row["param_diff_per_round"])


def _ran(
    block_id: str, folder, settings: dict[str, str], tier_report, text: str | None = None
) -> subprocess.CompletedProcess:
    """Run the page's block (or ``text``, a step of it); its outcome, once it succeeded."""
    start = time.monotonic()
    result = run_block(text or doc_block(block_id), cwd=folder, env=settings, timeout=BLOCK_TIMEOUT_S)
    tier_report(f"first-cluster.md: {block_id}: exit {result.returncode} ({time.monotonic() - start:.1f} s)")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_the_ray_steps_of_the_page(checkout, default_projects, docker_client, fltest_image, tier_report):
    """Steps 1 to 3: build (the images are there), up and status, the dashboard behind the token on loopback
    only, the example on the cluster with its results in ./results, the logs, down with nothing left."""
    settings = _ray_settings(checkout)
    project = RayEmulation(overrides=settings)
    try:
        built = _ran("first-cluster/build", checkout, settings, tier_report)
        assert f"base image {KIT.base_image}: present" in built.stdout + built.stderr, (
            built
        )  # built only when missing (images.md)
        rebuilt = _ran("upgrading/build", checkout, settings, tier_report)  # after a pull with no change
        assert f"image {IMAGE}: unchanged" in rebuilt.stdout + rebuilt.stderr, rebuilt
        up = _ran("first-cluster/up", checkout, settings, tier_report)
        ray_temp = project.ray_temp_volumes(docker_client)  # each node's /tmp/ray: gone with down
        assert (checkout / "compose" / "secrets" / "ray_token").stat().st_mode & 0o777 == 0o400
        assert len(project.containers(docker_client)) == 3, up.stdout

        ids = {c.name: c.id for c in project.containers(docker_client)}
        dashboard = _ran("first-cluster/dashboard", checkout, settings, tier_report)
        ray_temp |= project.ray_temp_volumes(docker_client)
        # upgrading.md: up recreates the containers whose settings changed (the head's, for the dashboard) alone
        now = {c.name: c.id for c in project.containers(docker_client) if c.name in ids}
        head_name = project.head(docker_client).name
        assert now[head_name] != ids[head_name] and all(now[n] == ids[n] for n in ids if n != head_name), (ids, now)
        # A new head is a new Ray cluster: every worker started again after the head (up restarts them; under load a
        # worker restarted that way can still reach the new head before its GCS answers, exit, and be restarted once
        # more by Docker's policy: CI showed RestartCount 1, so the count is not checked).
        head_started = started_at(project.head(docker_client))
        for worker in project.containers(docker_client, WORKER_SERVICE):
            assert started_at(worker) > head_started, worker.attrs["State"]
        jobs = dashboard.stdout.strip().splitlines()[-1]  # curl's answer, after up's lines
        assert isinstance(json.loads(jobs), list), dashboard.stdout  # the jobs (drivers) so far
        containers = project.containers(docker_client)
        services = sorted(c.labels["com.docker.compose.service"] for c in containers)
        assert services == sorted(["ray-dashboard", HEAD_SERVICE, "ray-worker", "ray-worker"]), services
        for container in containers:
            assert_hardened(container)
        head = project.head(docker_client)
        assert not head.attrs["HostConfig"]["PortBindings"]  # the head publishes nothing itself
        assert set(head.attrs["NetworkSettings"]["Networks"]) == {f"{project.name}_cluster"}
        forwarder = next(c for c in containers if c.labels["com.docker.compose.service"] == "ray-dashboard")
        assert forwarder.attrs["HostConfig"]["PortBindings"] == {
            "8265/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8265"}]
        }
        assert requests.get(DASHBOARD, timeout=10).status_code == 401
        assert requests.get(DASHBOARD, headers={"Authorization": "Bearer " + "0" * 64}, timeout=10).status_code == 403
        for address in host_addresses():
            with socket.socket() as probe:
                probe.settimeout(3)
                assert probe.connect_ex((address, 8265)) != 0, f"the dashboard answers on {address}:8265"

        _ran("first-cluster/up", checkout, settings, tier_report)  # "A later `up` without `--dashboard` turns it off"
        assert "ray-dashboard" not in {
            c.labels["com.docker.compose.service"] for c in project.containers(docker_client)
        }
        with pytest.raises(requests.ConnectionError):
            requests.get(DASHBOARD, timeout=10)

        _ran("first-cluster/run", checkout, settings, tier_report)
        experiment = checkout / "results" / "digits-cluster"
        summary = json.loads((experiment / "flower" / "summary.json").read_text())
        assert summary["status"] == "completed", summary
        assert summary["ray_address"] == "ray-head:6379", summary
        hostnames = {c.attrs["Config"]["Hostname"] for c in project.containers(docker_client)}
        assert set(summary["client_hosts"]) == hostnames and len(hostnames) == 3, summary  # on every node
        assert _difference_from_reference(experiment, "flower") <= TOLERANCE
        last_round = json.loads((experiment / "flower" / "metrics.jsonl").read_text().splitlines()[-1])
        assert "update_norm" in last_round["train"]  # the workers imported the config's hooks module
        assert (experiment / "report.png").is_file()

        logs = _ran("first-cluster/logs-down", checkout, settings, tier_report)
        assert "raylet" in logs.stdout + logs.stderr, logs.stdout[-3000:]  # the worker's Ray logs
        assert project.leftovers(docker_client) == []
        # The head, recreated twice (dashboard on, then off), mounted its first volume by name: down removes it too.
        assert {v.name for v in docker_client.volumes.list()} & ray_temp == set()
    finally:
        project.down()


def test_the_flower_step_of_the_page(checkout, default_projects, docker_client, fltest_image, tier_report):
    """Step 4: prepare the shipped example, up, list, run it next to the SuperLink, down; keys and partitions stay.
    Before its ``down``, upgrading.md's ``up`` block (one environment for both tools): it starts the Ray emulation
    and keeps every container of the federation, whose image and settings did not change."""
    settings = {**_ray_settings(checkout), **_flower_settings(checkout)}
    federation = FlowerFederation(
        generated_dir=checkout / "compose" / ".generated",
        overrides={key: value for key, value in settings.items() if key.startswith("FLOWER_")},
        client=docker_client,
    )
    project = RayEmulation(overrides=_ray_settings(checkout))
    try:
        *before_down, down = block_steps(doc_block("first-cluster/flower"))
        output = ""
        for number, step in enumerate(before_down, start=1):
            output += _ran(f"first-cluster/flower ({number})", checkout, settings, tier_report, text=step).stderr
        experiment = checkout / "results" / "digits-flower"
        comparison = json.loads((experiment / "comparison.json").read_text())
        runs = {run["run"]: run for run in comparison["runs"]}
        assert runs["flower"]["status"] == "completed" and runs["flower"]["rounds_completed"] == 3, output[-3000:]
        assert _difference_from_reference(experiment, "flower") <= TOLERANCE
        assert (
            "update_norm" in json.loads((experiment / "flower" / "metrics.jsonl").read_text().splitlines()[-1])["train"]
        )  # the example's hooks module travelled to the SuperNodes

        kept = {c.id for c in federation.containers(docker_client)}
        _ran("upgrading/up", checkout, settings, tier_report)
        assert {c.id for c in federation.containers(docker_client)} == kept  # nothing changed: nothing recreated
        assert len(project.containers(docker_client)) == 3  # the head and two workers, ready (down below)

        _ran("first-cluster/flower (down)", checkout, settings, tier_report, text=down)
        assert federation.leftovers(docker_client) == []
        keys = checkout / "compose" / "secrets" / "flower" / "keys"
        assert sorted(p.name for p in keys.iterdir()) == ["supernode-0", "supernode-1"]  # "keys ... stay"
    finally:
        project.down()
        federation.down()
        shutil.rmtree(checkout / "compose" / "secrets" / "flower" / "keys", ignore_errors=True)  # no private key stays
