"""What the lab's playbooks promise where the Ansible tier cannot make the fault on its emulated nodes: read from the
roles' own task files (a change that drops the promise fails here)."""

from __future__ import annotations

import yaml

from tests.conftest import REPO

ANSIBLE = REPO / "ansible"


def _tasks(role: str, name: str) -> list[dict]:
    """The tasks of ``ansible/roles/<role>/tasks/<name>.yml``, those of blocks flattened in order."""
    flat = []
    for task in yaml.safe_load((ANSIBLE / "roles" / role / "tasks" / f"{name}.yml").read_text()):
        flat += [task, *_flattened(task)]
    return flat


def _flattened(task: dict) -> list[dict]:
    return [inner for key in ("block", "rescue", "always") for t in task.get(key, []) for inner in (t, *_flattened(t))]


def test_an_archive_fetched_from_the_relay_is_checked_against_the_sha256_the_relay_computed():
    """upgrading.md: each fetch is checked against the sha256 the relay computed (read over SSH), so an archive
    changed on its way fails the fetch (Ansible's get_url refuses a checksum mismatch)."""
    tasks = {task.get("name"): task for task in _tasks("fltest_images", "relay")}
    summed = tasks["Checksum the archives the nodes fetch (sent to them over SSH, not over the relay's port)"]
    assert summed["ansible.builtin.stat"]["get_checksum"] is True
    assert summed["ansible.builtin.stat"]["checksum_algorithm"] == "sha256"
    fetch = tasks["Fetch the image archive from the relay"]["ansible.builtin.get_url"]
    assert fetch["checksum"].startswith(f"sha256:{{{{ ({summed['register']}.results ")
    assert fetch["checksum"].endswith(".stat.checksum }}")
    served = summed["ansible.builtin.stat"]["path"].rsplit("/", 1)[1]
    assert fetch["url"].endswith("/" + served), (fetch["url"], served)  # the file the relay summed is the one served


def test_teardown_stops_a_running_experiment_before_it_removes_anything():
    """faults.md: teardown.yml, like stop.yml, stops an experiment and brings its results back first."""
    plays = yaml.safe_load((ANSIBLE / "teardown.yml").read_text())
    assert plays[0]["ansible.builtin.import_playbook"] == "stop.yml", plays[0]
