"""The Ansible roles' GPU settings, computed by ansible-playbook on this machine (no node, no Docker): the Ray
container's --num-gpus and --gpus, a SuperNode's, fltest_gpus auto where nvidia-smi is missing, and the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy.gpus import DEVICES_VARIABLE
from fltest.model.devices import CLIENT_DEVICE_VARIABLE, GPU

REPO = Path(__file__).resolve().parents[1]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent

# Each host: what the inventory says (local connection: the roles' tasks that count GPUs run here).
HOSTS = {
    "cpu": {},
    "two": {"fltest_gpus": 2},
    "logical": {"fltest_gpus": 1, "fltest_gpu_devices": "none"},
    "auto": {"fltest_gpus": "auto"},
    "supernode": {"fltest_gpus": 1, "fltest_supernode_gpus": 1},
    "supernode-logical": {"fltest_gpus": 1, "fltest_supernode_gpus": 1, "fltest_gpu_devices": "none"},
    "too-many": {"fltest_gpus": 1, "fltest_supernode_gpus": 2},
    "bad-count": {"fltest_gpus": "lots"},
}
PROBE = """
- name: Compute the GPU settings of the Ray and SuperNode roles
  hosts: all
  gather_facts: false
  tasks:
    - name: The Ray role's GPUs
      ansible.builtin.include_role: {name: fltest_ray, tasks_from: gpus.yml, public: true}
    - name: The SuperNode role's GPUs
      ansible.builtin.include_role: {name: fltest_supernode, tasks_from: gpus.yml, public: true}
    - name: Write them down
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0644"
        content: >-
          {{ {'count': fltest_gpu_count | int, 'note': fltest_gpu_note, 'ray_args': fltest_ray_gpu_args,
              'ray_flags': fltest_ray_gpu_flags, 'supernode': fltest_supernode_gpu_options} | to_json }}
"""


@pytest.fixture(scope="module")
def computed(tmp_path_factory):
    """Each host's computed settings (or ``None`` where its play failed) and ansible-playbook's output."""
    playbook = shutil_which("ansible-playbook")
    tmp = tmp_path_factory.mktemp("gpu-roles")
    inventory = {
        "all": {
            "hosts": {
                name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **values}
                for name, values in HOSTS.items()
            }
        }
    }
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "probe.yml").write_text(PROBE)
    env = {
        **{k: v for k, v in os.environ.items() if k != "FLTEST_GPU_DEVICES"},
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        [playbook, "-i", str(tmp / "hosts.yml"), str(tmp / "probe.yml"), "-e", f"out={tmp}"],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    found = {
        name: json.loads((tmp / f"{name}.json").read_text()) if (tmp / f"{name}.json").is_file() else None
        for name in HOSTS
    }
    return found, result.stdout


def shutil_which(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {BIN}: pip install -e '.[test]'")
    return str(path)


def test_a_cpu_node_s_containers_get_no_gpu_and_keep_their_command(computed):
    cpu = computed[0]["cpu"]
    assert cpu == {"count": 0, "note": "", "ray_args": [], "ray_flags": [], "supernode": []}  # as before: no recreation


def test_a_node_s_gpus_reach_ray_and_its_container(computed):
    assert computed[0]["two"] | {"note": ""} == {
        "count": 2,
        "note": "",
        "ray_args": ["--num-gpus=2"],
        "ray_flags": ["--gpus", "count=2"],
        "supernode": [],
    }


def test_logical_gpus_reach_ray_but_no_device_is_requested(computed):
    logical = computed[0]["logical"]
    assert (logical["ray_args"], logical["ray_flags"]) == (["--num-gpus=1"], [])
    defaults = yaml.safe_load((ANSIBLE / "roles" / "fltest_gpu" / "defaults" / "main.yml").read_text())
    assert f"'{DEVICES_VARIABLE}'" in defaults["fltest_gpu_devices"]  # the emulation's variable works for the lab too


def test_auto_on_a_node_without_nvidia_smi_is_zero_and_says_so(computed):
    if subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0:
        pytest.fail("this machine has nvidia-smi: the test expects a machine without it (CI, these hosts)")
    auto = computed[0]["auto"]
    assert auto["count"] == 0 and auto["ray_args"] == [] and auto["ray_flags"] == []
    assert auto["note"] == "fltest_gpus auto: no nvidia-smi on the node: 0 GPUs", auto
    assert "auto: fltest_gpus auto: no nvidia-smi on the node: 0 GPUs" in computed[1]  # cluster.yml says it too


def test_a_supernode_given_a_gpu_tells_its_client_apps_and_gets_the_device(computed):
    told = f"--env={CLIENT_DEVICE_VARIABLE}={GPU}"  # the name fltest.model.torch_classifier reads
    assert computed[0]["supernode"]["supernode"] == [told, "--gpus", "count=1"]
    assert computed[0]["supernode-logical"]["supernode"] == [told]


@pytest.mark.parametrize(
    ("host", "line"),
    [
        (
            "too-many",
            "too-many: fltest_supernode_gpus=2, but the node has 1 (fltest_gpus=1): set fltest_gpus for the node",
        ),
        (
            "bad-count",
            "bad-count: fltest_gpus=lots, fltest_gpu_devices=nvidia: expected a GPU count or auto, and nvidia or none",
        ),
    ],
)
def test_a_setting_the_node_cannot_have_fails_that_host_in_one_line(computed, host, line):
    assert computed[0][host] is None
    assert line in computed[1], computed[1][-4000:]


REPORT = """
- name: Report the cluster as status.yml does, from the nodes' noted state
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check the SuperLink and the SuperNodes, report each node
      ansible.builtin.include_role: {name: fltest_status, tasks_from: report.yml}
"""


def _container(name: str, gpus: str = "0") -> dict:
    """What status.yml's node.yml notes of one running Ray container started with --num-cpus=1 (and --num-gpus)."""
    return {name: {"state": "running", "cpus": "1", "gpus": gpus}}


def _status(tmp_path, head: dict, worker: dict, ray_nodes: list[dict]) -> subprocess.CompletedProcess:
    """status.yml's report (roles/fltest_status/tasks/report.yml) on the controller, for a head and a worker noted so."""
    inventory = {
        "all": {
            "children": {
                "ray_head": {
                    "hosts": {
                        "h": {
                            "cluster_ip": "10.0.0.1",
                            "fltest_status_node": head,
                            "fltest_status_ray_nodes": ray_nodes,
                            "fltest_status_ray_error": "",
                        }
                    }
                },
                "ray_workers": {"hosts": {"w": {"cluster_ip": "10.0.0.2", "fltest_status_node": worker}}},
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "report.yml").write_text(REPORT)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    return subprocess.run(
        [
            shutil_which("ansible-playbook"),
            "-i",
            str(tmp_path / "hosts.yml"),
            str(tmp_path / "report.yml"),
            "-e",
            f"fltest_kit_file={REPO / 'deploy' / 'kit.env'}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _node(ip: str, gpus: float) -> dict:
    return {"hostname": ip, "ip": ip, "cpus": 1.0, "gpus": gpus, "node_id": ip, "start": ""}


def test_status_names_no_gpu_on_a_cluster_without_any(tmp_path):
    result = _status(
        tmp_path,
        _container("fltest-ray-head"),
        _container("fltest-ray-worker"),
        [_node("10.0.0.1", 0), _node("10.0.0.2", 0)],
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert '"h: fltest-ray-head running; Ray node alive with 1 CPU"' in result.stdout
    assert "cluster whole: 2 Ray nodes alive (2 CPUs)" in result.stdout and "GPU" not in result.stdout


def test_status_lists_each_node_s_gpus_and_the_total(tmp_path):
    head = {**_container("fltest-ray-head")}
    result = _status(tmp_path, head, _container("fltest-ray-worker", "1"), [_node("10.0.0.1", 0), _node("10.0.0.2", 1)])
    assert result.returncode == 0, result.stdout[-3000:]
    assert '"h: fltest-ray-head running; Ray node alive with 1 CPU, 0 GPUs"' in result.stdout
    assert '"w: fltest-ray-worker running; Ray node alive with 1 CPU, 1 GPU"' in result.stdout
    assert "cluster whole: 2 Ray nodes alive (2 CPUs, 1 GPU)" in result.stdout


def test_status_fails_naming_a_node_whose_ray_lacks_the_gpus_its_container_was_started_with(tmp_path):
    result = _status(
        tmp_path,
        _container("fltest-ray-head"),
        _container("fltest-ray-worker", "2"),
        [_node("10.0.0.1", 0), _node("10.0.0.2", 1)],
    )
    assert result.returncode == 2, result.stdout[-3000:]
    assert "cluster not whole: w (Ray lists 1 GPUs, not 2)" in result.stdout
