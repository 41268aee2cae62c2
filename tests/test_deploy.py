"""The host-side parts of deploy/ that need no Docker engine: node command lines, token, health, settings."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest
import yaml

import fltest
from deploy import images
from deploy.compose import compose_cli, compose_reason
from deploy.flower_emulation.federation import FlowerFederation
from deploy.images import (
    CONTEXT_FILES,
    CONTEXT_FOLDERS,
    DOCKERFILE,
    LOCK_HELD,
    REPO,
    one_build_at_a_time,
    serving_on_loopback,
    variant_tag,
)
from deploy.kit import KIT, KIT_FILE, env_file_values
from deploy.node.healthcheck import closed_ports, head_unreachable
from deploy.node.ray_start import NODE_START_LABEL, PORTS, WORKER_PORTS, start_args
from deploy.pki.ray_token import ensure_ray_token, token_problem
from deploy.ray_emulation.project import RayEmulation
from fltest.errors import FLTestError, InputError
from tests.network import free_port, host_addresses

REFUSED = 78  # the README's exit code of a node that refuses to start (EX_CONFIG), outside the compose file


def _flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def test_head_and_worker_listen_on_the_pinned_ports():
    head = start_args("head", 2, 100_000_000, None, None)
    worker = start_args("worker", 4, 100_000_000, "10.0.0.1:6379", "10.0.0.2")
    assert head[:3] == ["ray", "start", "--block"] and "--head" in head and "--head" not in worker
    assert _flag(head, "port") == str(PORTS["gcs"]) and _flag(worker, "address") == "10.0.0.1:6379"
    for args, cpus in ((head, "2"), (worker, "4")):
        assert _flag(args, "num-cpus") == cpus
        assert _flag(args, "node-manager-port") == str(PORTS["node_manager"])
        assert _flag(args, "object-manager-port") == str(PORTS["object_manager"])
        assert (_flag(args, "min-worker-port"), _flag(args, "max-worker-port")) == tuple(map(str, WORKER_PORTS))
    assert _flag(worker, "node-ip-address") == "10.0.0.2"
    assert not WORKER_PORTS[0] <= PORTS["client_server"] <= WORKER_PORTS[1]  # Ray Client outside the worker range
    assert _flag(head, "labels") is None  # a label only for a start that names itself
    labelled = start_args("worker", 1, 100_000_000, "10.0.0.1:6379", None, start_id="0123abcd")
    assert _flag(labelled, "labels") == f"{NODE_START_LABEL}=0123abcd"


@pytest.mark.parametrize(
    "env", [{}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/nonexistent"}], ids=["no-mode", "no-file"]
)
def test_a_node_refuses_to_start_without_token_authentication(env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    result = subprocess.run(
        [sys.executable, "-m", "deploy.node.ray_start", "head", "--num-cpus", "1"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == REFUSED
    assert "RAY_AUTH" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_token_is_created_once_and_kept_private(tmp_path):
    path = tmp_path / "secrets" / "ray_token"
    assert ensure_ray_token(path) == "created"
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read-only
    if os.geteuid() == 0:
        assert (path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) == (10001, 0o400)
    assert ensure_ray_token(path) == "kept" and path.read_text() == token  # never overwritten
    assert token_problem(path, 10001) is None and token_problem(path) is None


def deploy_token(path) -> subprocess.CompletedProcess:
    """``fltest-deploy token`` (as ``python -m deploy token``) with the Ray token file at ``path``."""
    return subprocess.run(
        [sys.executable, "-m", "deploy", "token"],
        env={**os.environ, "RAY_TOKEN_FILE": str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_fltest_deploy_token_creates_the_token_then_keeps_it(tmp_path):
    path = tmp_path / "secrets" / "ray_token"

    def token_command() -> str:
        result = deploy_token(path)
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        return result.stdout

    assert token_command() == f"{path}: created\n"
    token = path.read_text()
    assert token_command() == f"{path}: exists, kept\n"
    assert path.read_text() == token and len(token) == 64


def _bad_token(kind: str, path):
    """A token path that is not a usable token: a directory with a file, an empty file, unreadable by 10001."""
    if kind == "directory":
        path.mkdir()
        (path / "stray").write_text("x")
    else:
        path.write_text("" if kind == "empty" else "f" * 64)
        os.chmod(path, 0o400 if kind == "unreadable" else 0o444)
        if kind == "unreadable":
            os.chown(path, 12345, 12345) if os.geteuid() == 0 else os.chmod(path, 0o000)


BAD_TOKENS = {
    "directory": "is a directory, not the token file",
    "empty": "is empty",
    "unreadable": "is not readable by uid 10001 (mode 0400, owner 12345)"
    if os.geteuid() == 0
    else "is not readable by uid 10001 (mode 0000",
}


def test_an_empty_directory_docker_made_is_replaced_by_a_token_saying_so(tmp_path):
    path = tmp_path / "secrets" / "ray_token"
    path.mkdir(parents=True)  # what a bind mount of a missing token leaves behind
    result = deploy_token(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines() == [
        f"{path}: was an empty directory (Docker makes one for a missing token): replaced by a new token"
    ]
    assert path.is_file() and len(path.read_text()) == 64


@pytest.mark.parametrize("kind", BAD_TOKENS)
def test_an_unusable_token_is_one_line_and_exit_2_from_the_tools(tmp_path, kind):
    path = tmp_path / "ray_token"
    _bad_token(kind, path)
    assert token_problem(path, 10001).startswith(BAD_TOKENS[kind])
    result = deploy_token(path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    problem = token_problem(path, 10001)
    assert line == f"fltest-deploy: error: Ray token {path}: {problem} (remove it, then run: fltest-deploy token)"
    with pytest.raises(InputError):
        ensure_ray_token(path)  # `up` refuses it the same way, before compose


@pytest.mark.parametrize("kind", ["directory", "empty"])
def test_a_node_refuses_an_unusable_token_file_with_one_line(tmp_path, kind):
    path = tmp_path / "ray_token"
    _bad_token(kind, path)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
    for extra, code in (([], REFUSED), (["--refused-exit-code", "0"], 0)):
        result = subprocess.run(
            [sys.executable, "-m", "deploy.node.ray_start", "head", "--num-cpus", "1", *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == code
        assert result.stderr.strip().splitlines() == [
            f"deploy.node.ray_start: RAY_AUTH_TOKEN_PATH={path}: {BAD_TOKENS[kind]} (run: fltest-deploy token on the host)"
        ]


COMPOSE_129_FAILURE = """Creating network "p_cluster" with the default driver
Creating p_ray-head_1 ...
Creating p_ray-head_1 ... error

ERROR: for p_ray-head_1  Cannot create container for service ray-head: invalid mount config for type "bind": bind source path does not exist: /x/ray_token

ERROR: for ray-head  Cannot create container for service ray-head: invalid mount config for type "bind": bind source path does not exist: /x/ray_token
Encountered errors while bringing up the project.
"""


def test_compose_s_reason_is_its_last_error_line_trimmed():
    assert compose_reason(COMPOSE_129_FAILURE) == (
        'Cannot create container for service ray-head: invalid mount config for type "bind": bind source path does not exist: /x/ray_token'
    )
    v2 = " Container p-ray-head-1  Creating\nError response from daemon: Requested CPUs are not available\n"
    assert compose_reason(v2) == "Error response from daemon: Requested CPUs are not available"
    assert len(compose_reason("ERROR: " + "x" * 1000)) == 300
    assert compose_reason("") == ""


def test_a_compose_failure_is_one_line_with_compose_s_reason(tmp_path):
    try:
        tool = compose_cli()
    except Exception as exc:
        pytest.skip(f"no compose tool: {exc}")
    (tmp_path / "docker-compose.yml").write_text("services:\n  ray-head:\n    image: x\n    cpus: [not, a, number]\n")
    with pytest.raises(FLTestError) as failure:
        RayEmulation(directory=tmp_path, name="fltest-bad").compose("config")
    message = str(failure.value)
    assert message.startswith(f"{' '.join(tool)} config (project fltest-bad) failed (exit 1): ") and "cpus" in message
    assert "\n" not in message


def test_the_health_check_names_the_closed_ports():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]  # bound, not listening: refuses connections
            assert closed_ports("127.0.0.1", [open_port, closed_port]) == [closed_port]
            assert head_unreachable(f"127.0.0.1:{open_port}") is None
            assert (
                head_unreachable(f"127.0.0.1:{closed_port}")
                == f"head 127.0.0.1:{closed_port} unreachable (Connection refused)"
            )


def test_the_settings_shape_the_cluster(tmp_path):
    try:
        compose_cli()
    except Exception as exc:
        pytest.skip(f"no compose tool: {exc}")
    project = RayEmulation(
        name="fltest-settings",
        overrides={
            "RAY_WORKERS": "3",
            "RAY_HEAD_CPUS": "2",
            "RAY_WORKER_CPUS": "4",
            "RAY_TOKEN_FILE": str(tmp_path / "token"),
        },
    )
    shape = project.shape()
    assert (shape.nodes, shape.head_cpus, shape.worker_cpus, shape.cpus) == (4, 2.0, 4.0, 14.0)


def test_the_head_runs_the_dashboard_only_when_asked():
    default = start_args("head", 1, 100_000_000, None, None)
    assert (_flag(default, "include-dashboard"), _flag(default, "dashboard-host")) == ("false", "127.0.0.1")
    asked = start_args("head", 1, 100_000_000, None, None, dashboard_host="0.0.0.0")
    assert (_flag(asked, "include-dashboard"), _flag(asked, "dashboard-host")) == ("true", "0.0.0.0")
    assert _flag(asked, "dashboard-port") == str(PORTS["dashboard"])


def test_every_service_is_hardened_and_the_dashboard_is_published_on_loopback_only(tmp_path):
    try:
        compose_cli()
    except Exception as exc:
        pytest.skip(f"no compose tool: {exc}")
    overrides = {"RAY_TOKEN_FILE": str(tmp_path / "token"), "RAY_DASHBOARD_PORT": "18265"}
    plain = yaml.safe_load(RayEmulation(name="fltest-settings", overrides=overrides).compose("config").stdout)[
        "services"
    ]
    opted = yaml.safe_load(
        RayEmulation(name="fltest-settings", overrides=overrides, dashboard=True).compose("config").stdout
    )["services"]
    assert sorted(plain) == ["ray-head", "ray-worker"] and sorted(opted) == ["ray-dashboard", "ray-head", "ray-worker"]
    for name, service in [*plain.items(), *opted.items()]:
        assert service["cap_drop"] == ["ALL"] and service["security_opt"] == ["no-new-privileges:true"], name
        assert service["read_only"] is True and service["mem_limit"] and int(service["pids_limit"]) > 0, name
        assert "ports" not in service or name == "ray-dashboard", name
    assert "FLTEST_RAY_DASHBOARD" not in plain["ray-head"]["environment"]
    assert opted["ray-head"]["environment"]["FLTEST_RAY_DASHBOARD"] == "1"
    (published,) = opted["ray-dashboard"]["ports"]
    if isinstance(published, dict):  # compose v2 writes the long form, 1.29 keeps the short one
        published = f"{published['host_ip']}:{published['published']}:{published['target']}/{published['protocol']}"
    assert published == "127.0.0.1:18265:8265/tcp"


def test_both_emulations_get_the_kit_s_values_from_deploy_kit_env(tmp_path, monkeypatch):
    """The image, uid, work folder and ports in the compose files come from deploy/kit.env, through the compose wrapper."""
    try:
        compose_cli()
    except Exception as exc:
        pytest.skip(f"no compose tool: {exc}")
    for key in env_file_values(KIT_FILE):
        monkeypatch.delenv(key, raising=False)
    ray = yaml.safe_load(
        RayEmulation(name="fltest-kit", overrides={"RAY_TOKEN_FILE": str(tmp_path / "token")}).compose("config").stdout
    )
    flower = FlowerFederation(name="fltest-kit-flower", generated_dir=tmp_path)
    superlink_side = yaml.safe_load(flower.compose("config").stdout)["services"]
    for name, service in [*ray["services"].items(), *superlink_side.items()]:
        assert service["image"] == KIT.image and service["user"] == f"{KIT.uid}:{KIT.uid}", name
    head, worker = ray["services"]["ray-head"], ray["services"]["ray-worker"]
    assert head["environment"]["FLTEST_RAY_ADDRESS"] == f"ray-head:{KIT.ray_gcs_port}"
    assert f"--address=ray-head:{KIT.ray_gcs_port}" in worker["command"]
    assert any(str(volume).endswith(KIT.work_dir) or KIT.work_dir in str(volume) for volume in head["volumes"])
    cache = env_file_values(KIT_FILE)["FLTEST_DATASETS_CACHE"]  # fltest run's shards: on the work volume, not a tmpfs
    assert head["environment"]["HF_DATASETS_CACHE"] == cache and cache.startswith(KIT.work_dir + "/")
    assert f"--port={KIT.superlink_port}" in superlink_side["superlink"]["command"]
    assert f"--database={KIT.work_dir}/superlink.db" in superlink_side["superlink"]["command"]
    assert RayEmulation(overrides={}).setting("FLTEST_IMAGE") == KIT.image  # what `up` checks the engine for
    assert KIT.image == f"fltest:{fltest.__version__}"  # the image's tag is the package's version


def test_a_plain_docker_build_gets_the_arguments_fltest_deploy_passes():
    """images.md's `docker build` without --build-arg makes fltest-deploy build's image: every default is its value."""
    arguments = [
        line.removeprefix("ARG ").partition("=")
        for line in (REPO / "images" / "fltest" / "Dockerfile").read_text().splitlines()
        if line.startswith("ARG ")
    ]
    assert {name: default.strip('"') for name, _, default in arguments} == images.build_args()


def test_every_image_is_built_from_the_kit_s_debian_release_and_its_python(tmp_path):
    """deploy/kit.env's release is the base image, the Dockerfiles' default base and the lab node's; its Python
    is the one the wheelhouse downloads for and the one the base image really has."""
    for dockerfile in ("images/fltest/Dockerfile", "images/node/Dockerfile"):
        defaults = [line for line in (REPO / dockerfile).read_text().splitlines() if line.startswith("ARG BASE_IMAGE=")]
        assert defaults == [f"ARG BASE_IMAGE={KIT.base_image}"], dockerfile
    assert images.DEFAULT_BASE_IMAGE == KIT.base_image == f"fltest-base:{KIT.debian_release}"
    # The wheelhouse asks pip for the kit's Python: a dry run into an empty folder prints pip's command line.
    wheelhouse = subprocess.run(
        ["bash", "-x", str(REPO / "images" / "fill-wheelhouse.sh"), str(tmp_path / "wheelhouse")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": "true"},  # pip is not run: `true` stands for the interpreter
    )
    abi = "cp" + KIT.image_python.replace(".", "")
    assert f"--python-version {KIT.image_python} --abi {abi}" in wheelhouse.stderr, wheelhouse.stderr[-2000:]


def test_a_bad_config_is_refused_on_the_host_before_any_container(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\nclients: 0\n")
    result = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(config), "--results-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"fltest-deploy: error: {config}: ")
    assert not (tmp_path / "out").exists()


ACTOR_DIED = (
    "<class 'ray.exceptions.ActorDiedError'>:<'The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: ClientAppActor\n\tactor_id: 5f1d0c0e6a1b2c3d4e5f60718293a4b5c6d7e8f9\n\tpid: 812\n"
    "\tnamespace: 7e0d\n\tip: 172.26.0.3\n"
    "The actor is dead because its node has died. Node Id: 3f2a\n"
    "The actor never ran - it was cancelled before it started running.'>"
)


def test_a_ray_actor_error_names_the_node_s_machine_and_cause_in_one_line():
    from fltest.backends.flwr.ray_errors import describe_wrapped_error

    nodes = {"172.26.0.3": ("fltest_ray-worker_1", False)}
    assert (
        describe_wrapped_error(ACTOR_DIED, nodes.get)
        == "Ray node fltest_ray-worker_1 (172.26.0.3) died (ActorDiedError)"
    )
    assert describe_wrapped_error(ACTOR_DIED, lambda ip: None) == "Ray node 172.26.0.3 died (ActorDiedError)"
    alive = {"172.26.0.3": ("fltest_ray-worker_1", True)}
    unavailable = (
        "<class 'ray.exceptions.ActorUnavailableError'>:<'The actor None is unavailable: lost. The task may or may "
        "not have been executed on the actor.'>"
    )
    assert describe_wrapped_error(unavailable, alive.get) == (
        "its Ray node became unreachable: stopped, or cut off from the driver (ActorUnavailableError)"
    )
    killed = (
        "<class 'ray.exceptions.ActorUnavailableError'>:<'The actor 5f1d0c0e6a1b2c3d4e5f60718293a4b5c6d7e8f9 is unavailable: "
        "The actor is temporarily unavailable: RpcError: RPC Error message: Socket closed; RPC Error details:  rpc_code: 14."
        " The task may or may not have been executed on the actor.\n\tip: 172.26.0.3'>"
    )
    assert describe_wrapped_error(killed, alive.get) == (
        "Ray node fltest_ray-worker_1 (172.26.0.3) became unreachable: stopped, or cut off from the driver (ActorUnavailableError)"
    )
    raised = "<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nTraceback ...\nValueError: bad shard'>"
    assert describe_wrapped_error(raised) == "ValueError: bad shard"  # no stray '>
    in_task = (
        "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run() (pid=1, ip=192.0.2.2)\n"
        '  File "hooks.py", line 3, in before_local_training\nValueError: client one broke\n\n'
        "The above exception was the direct cause of the following exception:\n\n"
        "flwr.clientapp.client_app.ClientAppException: \nException ClientAppException occurred. Message: client one broke'>"
    )
    assert describe_wrapped_error(in_task, alive.get) == "client one broke"  # as a simulation's client raises it
    assert describe_wrapped_error("plain reason") is None


def test_the_dashboard_forwarder_passes_bytes_both_ways_unchanged():
    import asyncio

    from deploy.node.tcp_forward import host_port, serve

    assert host_port("ray-head:8265") == ("ray-head", 8265)
    for bad in ("ray-head", ":8265", "ray-head:http"):
        with pytest.raises(ValueError):
            host_port(bad)

    async def exchange() -> bytes:
        async def echo(reader, writer):
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()

        target = await asyncio.start_server(echo, "127.0.0.1", 0)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        forwarder = asyncio.create_task(serve(("127.0.0.1", port), target.sockets[0].getsockname()[:2]))
        for _ in range(100):  # until the forwarder listens
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.05)
        writer.write(b"get /api/jobs/\n")
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        forwarder.cancel()
        target.close()
        return reply

    assert asyncio.run(exchange()) == b"GET /API/JOBS/\n"


def test_the_image_build_sends_only_its_listed_files_so_no_key_or_token_reaches_an_image():
    """What ``fltest-deploy build`` sends the engine (the SDK applies .dockerignore as docker does): the listed
    files and folders and the wheelhouse, nothing else; compose/secrets/ (keys, the Ray token) never."""
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sent = exclude_paths(str(REPO), patterns, DOCKERFILE)
    allowed = set(CONTEXT_FILES)
    assert sent and all(path in allowed or path.split("/")[0] in (*CONTEXT_FOLDERS, "wheelhouse") for path in sent), (
        sorted(
            path for path in sent if path not in allowed and path.split("/")[0] not in (*CONTEXT_FOLDERS, "wheelhouse")
        )
    )


def test_an_unknown_image_extra_is_one_line_and_exit_2_before_the_engine_is_asked():
    result = subprocess.run(
        [sys.executable, "-m", "deploy", "build", "--extras", "torch,tensorflow"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(
        "fltest-deploy: error: --extras: unknown extra tensorflow (pyproject.toml's extras: "
    ), result.stderr
    assert (
        variant_tag("fltest:0.1.0", ("torch",)) == "fltest:0.1.0-torch"
        and variant_tag("fltest:0.1.0", ()) == "fltest:0.1.0"
    )


def test_the_extras_wheelhouse_is_served_on_loopback_only_while_the_build_runs(tmp_path):
    """pip reads the listing as find-links; nothing answers on the host's other addresses, nor after the block."""
    import urllib.request

    (tmp_path / "demo-1.0-py3-none-any.whl").write_bytes(b"wheel")
    port = free_port()
    with serving_on_loopback(tmp_path, port) as url:
        assert url == f"http://127.0.0.1:{port}/"
        listing = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'href="demo-1.0-py3-none-any.whl"' in listing
        assert urllib.request.urlopen(url + "demo-1.0-py3-none-any.whl", timeout=10).read() == b"wheel"
        for address in host_addresses():
            with socket.socket() as probe:
                probe.settimeout(3)
                assert probe.connect_ex((address, port)) != 0, f"the wheelhouse answers on {address}:{port}"
        with pytest.raises(FLTestError, match=rf"cannot serve {tmp_path} on 127.0.0.1:{port} for the build: "):
            with serving_on_loopback(tmp_path, port):
                pass
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # stopped with the block


def test_a_build_whose_caller_holds_the_lock_does_not_wait_for_it_and_others_do(tmp_path, monkeypatch):
    """A script that holds the build lock around ``fltest-deploy build`` tells it so (``FLTEST_IMAGE_BUILD_LOCK_HELD=1``).

    On a lock of the test's own (TMPDIR): the host's is held by any real build beside this session
    (in CI the PyTorch variant's, minutes), which this test would first wait for.
    """
    monkeypatch.setattr(images, "LOCK", tmp_path / images.LOCK.name)
    take_lock = (
        "from deploy.images import one_build_at_a_time\nwith one_build_at_a_time():\n    print('locked', flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != LOCK_HELD} | {"TMPDIR": str(tmp_path)}
    with one_build_at_a_time(report=lambda line: None):
        told = subprocess.run(
            [sys.executable, "-c", take_lock],
            env={**env, LOCK_HELD: "1"},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert told.stdout == "locked\n", told.stderr
        with pytest.raises(subprocess.TimeoutExpired) as waited:
            subprocess.run(
                [sys.executable, "-c", take_lock], env=env, cwd=REPO, capture_output=True, text=True, timeout=5
            )
        assert b"waiting for another image build to finish" in (waited.value.stderr or b"")
