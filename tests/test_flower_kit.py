"""The Flower emulation's files, without Docker: who listens where, the proxy's rules, every container hardened."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy.commands.fltest_flower import build_parser
from deploy.compose import COMPOSE_DIR, compose_cli
from deploy.flower_emulation.federation import (
    APP_FILES_VOLUME,
    FLEET_ADDRESS,
    FLEET_PORT,
    FLWR_SERVICE,
    HOLDER_SERVICE,
    OPERATOR_SERVICE,
    PROXY_CONFIG,
    PROXY_SERVICE,
    SUPERLINK_SERVICE,
    FlowerFederation,
    app_files_volume,
)
from deploy.flower_emulation.flwr_in_namespace import check_folder, copy_noting_run_ids, flwr_command
from deploy.flower_emulation.run_in_namespace import host_paths, operator_command
from deploy.flower_emulation.runs import OPERATOR_FLWR
from deploy.kit import KIT, KIT_FILE, env_file_values
from deploy.node.superlink_flwr import CA_MOUNT, IMAGE_ENV, SUPERLINK_ADDRESS, SUPERLINK_PORT, TLS_MOUNT
from fltest.config import load_config
from fltest.config.schema import ExperimentConfig
from fltest.errors import FLTestError, InputError
from tests.conftest import base_config

HARDENING = ("cap_drop", "security_opt", "read_only", "tmpfs", "mem_limit", "pids_limit", "user")


def _with_kit_values(text: str) -> str:
    """``text`` with the kit's ``${KEY}`` values put in, as the compose wrapper's environment gives them to compose."""
    for key, value in env_file_values(KIT_FILE).items():
        text = text.replace(f"${{{key}}}", value)
    return text


def _compose() -> dict:
    return yaml.safe_load(_with_kit_values((COMPOSE_DIR / "flower.yml").read_text()))


def test_the_superlink_listens_inside_its_namespace_only_and_nothing_is_published():
    services = _compose()["services"]
    assert all("ports" not in service and "expose" not in service for service in services.values())
    command = services[SUPERLINK_SERVICE]["command"]
    assert "--host=127.0.0.1" in command and f"--port={SUPERLINK_PORT}" in command
    for name in (SUPERLINK_SERVICE, PROXY_SERVICE, OPERATOR_SERVICE):
        assert services[name]["network_mode"] == f"service:{HOLDER_SERVICE}"
    assert services[HOLDER_SERVICE]["networks"]["flower"]["aliases"] == [FLEET_ADDRESS.split(":")[0]]
    assert services[OPERATOR_SERVICE]["profiles"] == ["operator"]  # never started by `up`
    assert SUPERLINK_ADDRESS == f"127.0.0.1:{SUPERLINK_PORT}"


def test_the_proxy_forwards_health_and_fleet_only_to_the_superlink_checked_against_the_ca():
    text = re.sub(r"#.*", "", PROXY_CONFIG.read_text())
    assert re.findall(r"^\s*listen\s+(.*);", text, re.M) == [f"{FLEET_PORT} ssl"]
    assert re.findall(r"^\s*server\s+(\S+);", text, re.M) == [f"127.0.0.1:{SUPERLINK_PORT}"]
    assert re.findall(r"^\s*location\s+(.*?)\s*\{", text, re.M) == ["= /health", "/v1/fleet/", "/"]
    assert re.findall(r"proxy_pass\s+(\S+);", text) == ["https://superlink", "https://superlink"]
    assert "proxy_ssl_verify on;" in text and f"proxy_ssl_trusted_certificate {CA_MOUNT};" in text
    assert f"ssl_certificate {TLS_MOUNT}/superlink.crt;" in text
    assert re.search(r"location / \{\s*return 403;\s*\}", text)
    assert re.search(
        r'map \$request_uri \$fleet_request \{\s*"/health" 1;\s*"~\^/v1/fleet/\[a-z0-9-\]\+\$" 1;\s*default 0;', text
    )
    command = _compose()["services"][PROXY_SERVICE]["command"]
    assert command[-1] == f"/opt/fltest/app/deploy/node/{PROXY_CONFIG.name}"  # the file as the image ships it
    assert all(path.startswith("/tmp/") for path in re.findall(r"_path\s+(\S+);", text))  # a read-only root elsewhere


def test_every_service_is_hardened_with_limits_from_flower_env(tmp_path):
    services = _compose()["services"]
    federation = FlowerFederation(
        generated_dir=tmp_path, overrides={"FLOWER_DATA_DIR": str(tmp_path), "FLOWER_KEYS_DIR": str(tmp_path)}
    )
    supernode = yaml.safe_load(_with_kit_values(yaml.safe_dump(federation.supernode_service("supernode-0", 0, 2))))
    for name, service in [*services.items(), ("supernode-0", supernode)]:
        assert all(key in service for key in HARDENING), name
        assert service["cap_drop"] == ["ALL"] and service["security_opt"] == ["no-new-privileges:true"], name
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp:mode=1777"], name
        assert service["user"] == "10001:10001", name
        assert isinstance(service["pids_limit"], int) and service["pids_limit"] > 0, name
        assert federation.setting(re.fullmatch(r"\$\{(\w+)\}", service["mem_limit"]).group(1)), (
            name
        )  # a flower.env setting
        assert service["environment"]["HF_HOME"].startswith("/tmp/") and service["environment"]["FLWR_HOME"].startswith(
            "/tmp/"
        )
    assert supernode["mem_limit"] == "${FLOWER_SUPERNODE_MEMORY}"
    assert supernode["depends_on"] == {PROXY_SERVICE: {"condition": "service_healthy"}}
    assert f"--superlink={FLEET_ADDRESS}" in supernode["command"]


def _deployment_config(tmp_path: Path, ca: str) -> Path:
    config = base_config()
    config.pop("hooks")
    config["runs"] = [
        {
            "name": "flower",
            "framework": "flwr",
            "options": {"mode": "deployment", "superlink": SUPERLINK_ADDRESS, "root_certificates": ca},
        }
    ]
    path = tmp_path / "conf" / "experiment.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.usefixtures("compose_tool")
def test_the_operator_container_sees_the_config_and_the_ca_read_only_and_writes_results_and_shards_only(tmp_path):
    path = _deployment_config(tmp_path, "ca.crt")  # relative: beside the config, as fltest reads it on the host
    (path.parent / "ca.crt").write_text("not read here")
    mounts = host_paths(load_config(path), path, "/tmp")
    assert mounts == {path: path, path.parent / "ca.crt": path.parent / "ca.crt"}
    cache = tmp_path / "hf" / "datasets"
    command, _ = operator_command(
        FlowerFederation(generated_dir=tmp_path), "op-1", path, tmp_path / "results", mounts, tmp_path, cache
    )
    run = command[command.index("run") :]
    volumes = [run[i + 1] for i, arg in enumerate(run) if arg == "--volume"]
    assert volumes == [
        f"{path}:{path}:ro",
        f"{path.parent}/ca.crt:{path.parent}/ca.crt:ro",
        f"{tmp_path}/results:{tmp_path}/results",
        f"{cache}:{cache}",  # the user's shard sets, reused by the run
    ]
    assert run[run.index("-e") + 1] == f"HF_DATASETS_CACHE={cache}"
    assert run[run.index("--workdir") + 1] == str(tmp_path) and run[run.index("--user") + 1].count(":") == 1
    assert run[run.index("--name") + 1] == "op-1"
    assert run[run.index(OPERATOR_SERVICE) + 1 :] == [
        "fltest",
        "run",
        str(path),
        "--results-dir",
        f"{tmp_path}/results",
    ]


def test_a_ca_under_the_users_home_is_mounted_where_fltest_in_the_container_reads_it(tmp_path, monkeypatch):
    """``~`` is the home of whoever reads the config: the host user's for the check, the container's for the run."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ca = tmp_path / "home" / ".fltest" / "lab" / "ca.crt"
    ca.parent.mkdir(parents=True)
    ca.write_text("not read here")
    path = _deployment_config(tmp_path, "~/.fltest/lab/ca.crt")
    assert host_paths(load_config(path), path, "/tmp") == {path: path, ca: Path("/tmp/.fltest/lab/ca.crt")}


@pytest.mark.parametrize(
    "names", [{"model": {"module": "my_model"}}, {"hooks": "my_hooks"}], ids=["model-module", "hooks"]
)
def test_a_config_naming_a_user_module_brings_its_folder_read_only(tmp_path, names):
    (tmp_path / "ca.crt").write_text("not read here")
    path = _deployment_config(tmp_path, str(tmp_path / "ca.crt"))
    config = ExperimentConfig.model_validate({**yaml.safe_load(path.read_text()), **names})
    expected = {path: path, path.parent: path.parent, tmp_path / "ca.crt": tmp_path / "ca.crt"}
    assert host_paths(config, path, "/tmp") == expected  # where fltest imports the module


def test_a_missing_ca_file_is_one_line_and_exit_2_before_any_container(tmp_path):
    path = _deployment_config(tmp_path, "missing.crt")
    result = subprocess.run(
        [sys.executable, "-m", "deploy.commands.fltest_flower", "run", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"fltest-flower: error: {path}: runs.flower.options.root_certificates: {path.parent}/missing.crt: no such file"
    ]
    assert not (tmp_path / "missing.crt").exists() and not (tmp_path / "results").exists()


@pytest.mark.usefixtures("compose_tool")
def test_a_compose_failure_is_one_line_naming_the_verb_the_project_and_compose_s_reason(tmp_path):
    generated = tmp_path / "generated"
    generated.mkdir()
    (generated / "supernodes.yml").write_text("services: [not, a, mapping\n")  # compose cannot parse it
    federation = FlowerFederation(name="fltest-flower-kit-test", generated_dir=generated)
    with pytest.raises(FLTestError) as failure:
        federation.compose("config")
    (line,) = str(failure.value).splitlines()
    tool = " ".join(compose_cli())
    assert re.fullmatch(
        rf"{re.escape(tool)} config \(project fltest-flower-kit-test\) failed \(exit \d+\): \S.*", line
    ), line


# The kit values only the image build reads (fltest-deploy build, on the controller): a lab node loads the built image.
IMAGE_BUILD_ONLY = ("FLTEST_DEBIAN_RELEASE", "FLTEST_IMAGE_PYTHON", "FLTEST_IMAGE_GLIBC")


def test_the_ansible_roles_name_the_same_ports_paths_and_module_as_the_emulation():
    defaults = yaml.safe_load(
        (COMPOSE_DIR.parent / "ansible" / "roles" / "fltest_flower" / "defaults" / "main.yml").read_text()
    )
    kit_role = yaml.safe_load(
        (COMPOSE_DIR.parent / "ansible" / "roles" / "fltest_kit" / "defaults" / "main.yml").read_text()
    )
    nodes_need = [key for key in env_file_values(KIT_FILE) if key not in IMAGE_BUILD_ONLY]
    assert all(any(f"'{key}'" in str(value) for value in kit_role.values()) for key in nodes_need), (
        "a kit value Ansible does not read"
    )
    assert SUPERLINK_ADDRESS == f"127.0.0.1:{KIT.superlink_port}" and FLEET_PORT == KIT.fleet_port
    assert (
        defaults["fltest_flower_api_address"] == "127.0.0.1:{{ fltest_kit_superlink_port }}"
    )  # the kit's, as SUPERLINK_ADDRESS
    assert defaults["fltest_flower_proxy_port"] == "{{ fltest_kit_fleet_port }}"
    assert defaults["fltest_flower_tls_mount"] == TLS_MOUNT
    assert "'python', '-m', 'deploy.node.superlink_flwr'" in defaults["fltest_flower_flwr"]
    superlink = (COMPOSE_DIR.parent / "ansible" / "roles" / "fltest_superlink" / "tasks" / "main.yml").read_text()
    assert f"/opt/fltest/app/deploy/node/{PROXY_CONFIG.name}" in superlink  # the proxy runs the image's own file


ANSIBLE_ROLES = COMPOSE_DIR.parent / "ansible" / "roles"


def test_every_serverapp_and_clientapp_works_in_a_bounded_volume_of_its_own(tmp_path):
    """The SuperLink's and each SuperNode's working folder (where Flower starts each ServerApp and ClientApp) is a tmpfs
    volume of its own, bounded by FLOWER_APP_FILES_SIZE: not the read-only root (an App writing final_model.npz there got
    EROFS, exit 201), not a volume another container writes."""
    compose = _compose()
    services, volumes = compose["services"], compose["volumes"]
    options = volumes[APP_FILES_VOLUME]["driver_opts"]
    assert (options["type"], options["device"]) == ("tmpfs", "tmpfs")
    assert options["o"] == f"size=${{FLOWER_APP_FILES_SIZE}},uid={KIT.uid},gid={KIT.uid},mode=0700"
    assert FlowerFederation(generated_dir=tmp_path).setting("FLOWER_APP_FILES_SIZE")  # flower.env sets the bound
    assert services[SUPERLINK_SERVICE]["working_dir"] == KIT.app_files_dir
    assert f"{APP_FILES_VOLUME}:{KIT.app_files_dir}" in services[SUPERLINK_SERVICE]["volumes"]
    assert (
        f"{APP_FILES_VOLUME}:{KIT.app_files_dir}" in services[HOLDER_SERVICE]["volumes"]
    )  # keeps them while the SuperLink restarts
    mounts = [
        name
        for name, service in services.items()
        if f"{APP_FILES_VOLUME}:{KIT.app_files_dir}" in service.get("volumes", [])
    ]
    assert sorted(mounts) == sorted(
        [HOLDER_SERVICE, SUPERLINK_SERVICE]
    )  # the holder runs sleep only: no App writes there
    federation = FlowerFederation(
        generated_dir=tmp_path, overrides={"FLOWER_DATA_DIR": str(tmp_path), "FLOWER_KEYS_DIR": str(tmp_path)}
    )
    generated = yaml.safe_load(federation.write_supernodes({"supernode-0": 0, "supernode-1": 1}, 2).read_text())
    for node in ("supernode-0", "supernode-1"):
        service = generated["services"][node]
        assert service["working_dir"] == KIT.app_files_dir
        assert f"{app_files_volume(node)}:{KIT.app_files_dir}" in service["volumes"]  # its own: not the other node's
        assert (
            generated["volumes"][app_files_volume(node)] == federation.app_files_volume_options()
        )  # flower.yml's, as written


def test_the_lab_s_serverapps_and_clientapps_work_in_a_bounded_volume_of_their_own():
    """The Ansible roles give the SuperLink and each SuperNode the same working folder on a tmpfs volume of its own."""
    flower = yaml.safe_load((ANSIBLE_ROLES / "fltest_flower" / "defaults" / "main.yml").read_text())
    volume_task = (ANSIBLE_ROLES / "fltest_flower" / "tasks" / "app_files_volume.yml").read_text()
    assert "type=tmpfs" in volume_task and "device=tmpfs" in volume_task
    assert (
        "o=size={{ fltest_flower_app_files_size }},uid={{ fltest_kit_uid }},gid={{ fltest_kit_uid }},mode=0700"
        in volume_task
    )
    assert flower["fltest_flower_superlink_app_files_volume"] != flower["fltest_flower_supernode_app_files_volume"]
    superlink = (ANSIBLE_ROLES / "fltest_superlink" / "tasks" / "main.yml").read_text()
    supernode = (ANSIBLE_ROLES / "fltest_supernode" / "tasks" / "main.yml").read_text()
    assert (
        "'--volume=' ~ fltest_flower_superlink_app_files_volume ~ ':' ~ fltest_kit_app_files_dir, '--workdir=' ~ fltest_kit_app_files_dir"
        in superlink
    )
    assert (
        '"--volume={{ fltest_flower_superlink_app_files_volume }}:{{ fltest_kit_app_files_dir }}"' in superlink
    )  # the holder
    assert "'--volume=' ~ fltest_flower_supernode_app_files_volume ~ ':' ~ fltest_kit_app_files_dir," in supernode
    assert "'--workdir=' ~ fltest_kit_app_files_dir]" in supernode


def test_the_operator_s_flwr_runs_next_to_the_superlink_with_the_ca_only():
    service = _compose()["services"][FLWR_SERVICE]
    assert service["network_mode"] == f"service:{HOLDER_SERVICE}" and service["profiles"] == ["operator"]
    assert service["volumes"] == [f"${{FLOWER_TLS_DIR}}/superlink/ca.crt:{CA_MOUNT}:ro"]
    assert service["command"][: len(OPERATOR_FLWR)] == OPERATOR_FLWR


@pytest.mark.usefixtures("compose_tool")
def test_fltest_flower_flwr_runs_flwr_as_the_user_in_the_current_folder_which_alone_it_sees(tmp_path):
    federation = FlowerFederation(generated_dir=tmp_path, overrides={"FLTEST_IMAGE": "fltest:9.9.9"})
    command, _ = flwr_command(federation, "flwr-1", ["run", ".", "fltest", "--stream"], tmp_path)
    run = command[command.index("run") :]
    assert run[run.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}" and run[run.index("--workdir") + 1] == str(
        tmp_path
    )
    assert [run[i + 1] for i, arg in enumerate(run) if arg == "--volume"] == [f"{tmp_path}:{tmp_path}"]
    assert run[run.index("-e") + 1] == f"{IMAGE_ENV}=fltest:9.9.9" and run[run.index("--name") + 1] == "flwr-1"
    assert run[run.index(FLWR_SERVICE) + 1 :] == [*OPERATOR_FLWR, "run", ".", "fltest", "--stream"]


@pytest.mark.parametrize(
    "argv", [["flwr", "run", ".", "fltest", "--stream"], ["flwr", "--help"], ["flwr", "ls", "--format", "json"]]
)
def test_every_argument_after_flwr_is_flwr_s(argv):
    args = build_parser().parse_args(argv)
    assert (args.command, args.flwr_args) == ("flwr", argv[1:])


@pytest.mark.parametrize("folder", ["/", "/usr", "/usr/lib", "/var", "/tmp", "/opt"])
def test_a_folder_that_would_hide_part_of_the_image_is_refused(folder):
    with pytest.raises(InputError, match=rf"fltest-flower flwr: run it from your App's folder, not {folder} "):
        check_folder(Path(folder))


def test_an_app_folder_is_accepted(tmp_path):
    check_folder(tmp_path / "my-app")
    check_folder(Path("/tmp/my-app"))
    check_folder(Path("/home/someone/my-app"))


def test_flwr_s_output_is_copied_as_it_comes_and_the_run_it_started_noted():
    output = (
        b"Using SuperLink: fltest (127.0.0.1:9443)\nSuccessfully started run 4628065833564848337\n"
        b"INFO :      Starting logstream for run_id `4628065833564848337`\n"
    )  # flwr run --stream, as flwr 1.42 prints it
    copied, run_ids = io.BytesIO(), []
    copy_noting_run_ids(io.BytesIO(output), copied, run_ids)
    assert copied.getvalue() == output and run_ids == [4628065833564848337]
    run_ids.clear()
    copy_noting_run_ids(
        io.BytesIO(b'{\n  "success": true,\n  "run-id": "15852178126510546755",\n}\n'), io.BytesIO(), run_ids
    )
    assert run_ids == [15852178126510546755]  # flwr run --format json


@pytest.mark.parametrize("flwr_args", [["--help"], ["run", "--help"]])
def test_fltest_flower_flwr_help_is_flwr_s_own_without_a_federation(tmp_path, flwr_args):
    """As the CLI reference says, ``--help`` goes to flwr: its help needs no federation, no CA, no container."""
    env = {**os.environ, "FLOWER_TLS_DIR": str(tmp_path / "tls"), "COLUMNS": "100"}
    fltest_flower = str(Path(sys.executable).with_name("fltest-flower"))
    ours = subprocess.run([fltest_flower, "flwr", *flwr_args], cwd=tmp_path, env=env, capture_output=True, text=True)
    flwr = subprocess.run(
        [str(Path(sys.executable).with_name("flwr")), *flwr_args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (ours.returncode, ours.stdout, ours.stderr) == (0, flwr.stdout, flwr.stderr)
    assert "Usage: flwr " in ours.stdout
    assert not (tmp_path / "tls").exists()


def test_fltest_flower_flwr_without_the_federation_s_ca_is_one_line_before_any_container(tmp_path):
    env = {**os.environ, "FLOWER_TLS_DIR": str(tmp_path / "tls")}
    result = subprocess.run(
        [sys.executable, "-m", "deploy.commands.fltest_flower", "flwr", "ls", "fltest"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"fltest-flower: error: {tmp_path}/tls/superlink/ca.crt: no CA certificate: start the federation first (fltest-flower up)"
    ]
    assert not (tmp_path / "tls").exists()  # Docker would have made a root-owned folder of the missing file
