"""Every benchmark in bench/ runs, at its smallest size, as a user runs it: a broken benchmark is noticed.

These check that a benchmark runs to its table and that the table says what it measured; the figures
themselves are the benchmark's to report (at this size they measure start-up, not the frameworks).
The Docker benchmarks (emulation.py, faults.py, image_distribution.py) bring up projects or lab nodes of their own
for minutes, and gpu_check.py needs a GPU: here they are only imported and parse their options (``--help``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

NUMBER = r"-?\d+(?:\.\d+)?"


def bench(tmp_path, script: str, *args: str, timeout: float = 600, cpus: str | None = None) -> str:
    """``python bench/<script> <args>`` from an empty working folder (on the CPUs ``cpus`` names, through ``taskset``,
    when given); its output (it must exit 0)."""
    result = subprocess.run(
        [*(["taskset", "--cpu-list", cpus] if cpus else []), sys.executable, str(REPO / "bench" / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_reference_overhead(tmp_path):
    out = bench(tmp_path, "reference_overhead.py", "--rounds", "1", "--clients", "2", "--repeat", "1")
    assert re.search(rf"^ +2 +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M), out


def test_data_scale_without_ray(tmp_path):
    out = bench(tmp_path, "data_scale.py", "--rows", "200", "--clients", "2", "--no-ray")
    assert re.search(rf"^wall time \(s\) +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M), out
    assert re.search(rf"^shard bytes / source bytes: .* = {NUMBER}$", out, re.M), out


@pytest.mark.parametrize(
    "script", ["emulation.py", "faults.py", "image_distribution.py", "gpu_check.py", "cluster_payoff.py"]
)
def test_the_docker_and_gpu_benchmarks_import_and_parse_their_options(tmp_path, script):
    assert bench(tmp_path, script, "--help").startswith(f"usage: {script} ")


def test_cluster_payoff_fits_and_draws_measurements_it_is_given(tmp_path):
    """The grid's analysis without the emulation: rounds of a known model in, that model's terms and its break-even
    (2 local epochs: per_sample_epoch * E = remote_per_sample) out, and the picture."""
    model = {"driver": 0.5, "driver_per_client": 0.01, "per_sample_epoch": 1e-5, "remote_per_sample": 2e-5}
    rows = []
    for nodes in (1, 2):
        for clients in (4, 20, 120):
            for epochs in (1, 5):
                round_s = (
                    model["driver"]
                    + model["driver_per_client"] * clients
                    + model["per_sample_epoch"] * epochs * 50_000 / nodes
                    + model["remote_per_sample"] * 50_000 * (1 - 1 / nodes)
                )
                rows.append(
                    {
                        "nodes": nodes,
                        "clients": clients,
                        "epochs": epochs,
                        "samples": 50_000,
                        "first_round_s": round_s + 2,
                        "round_s": round_s,
                    }
                )
    (tmp_path / "grid.json").write_text(json.dumps(rows))
    out = bench(tmp_path, "cluster_payoff.py", "--from-json", "grid.json", "--plot", "grid.png")
    assert re.search(r"^driver_s +0\.5$", out, re.M), out
    assert re.search(r"^remote_per_sample_s +2e-05$", out, re.M), out
    assert "break-even, 20 clients: two nodes pay off above 2.00 local epochs" in out, out
    assert (tmp_path / "grid.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.ray
@pytest.mark.nvflare
def test_strategies(tmp_path):
    """FedAvgM on the built-in model: Flower's, bit for bit; NVFlare has it only for PyTorch models (unsupported, not started)."""
    out = bench(
        tmp_path, "strategies.py", "--model", "logreg", "--strategies", "fedavgm", "--rounds", "1", "--clients", "2"
    )
    assert re.search(r"^fedavgm +flower +completed +0\.00e\+00 +- +0\.00e\+00 +[0-9.]+$", out, re.M), out
    assert re.search(r"^fedavgm +nvflare +unsupported ", out, re.M), out
    assert re.search(r"^fedavgm on nvflare: not run: ", out, re.M), out


def test_aggregation_cost(tmp_path):
    """Every strategy's aggregation timed on both sides, and Flower's model the reference's within 1e-9 (not bit for
    bit where Flower sums in another order, or its q-FedAvg adds 1e-10 to each loss)."""
    out = bench(tmp_path, "aggregation_cost.py", "--clients", "8", "--rounds", "2", "--inputs", "16", timeout=60)
    for name in ("fedavg", "fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan", "qfedavg"):
        row = re.search(rf"^{name} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +[+-]{NUMBER} +(\S+)$", out, re.M)
        assert row, out
        assert float(row[1]) <= 1e-9, row[0]
    assert re.search(rf"^one full garbage collection in this process: {NUMBER} s ", out, re.M), out


@pytest.mark.ray
@pytest.mark.nvflare
def test_nvflare_rounds(tmp_path):
    out = bench(tmp_path, "nvflare_rounds.py", "--clients", "2", "--rounds", "2", "--cpus", "1")
    for backend in ("reference", "flwr", "nvflare"):
        assert re.search(rf"^{backend} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M), out


@pytest.mark.nvflare
def test_many_clients(tmp_path):
    """A CIFAR-shaped set, the reference and NVFlare on one CPU (taskset), where FLTest runs 6 of the 8 clients at
    once and swaps the others in: NVFlare's model is the reference's, bit for bit."""
    out = bench(
        tmp_path,
        *("many_clients.py", "--clients", "8", "--rounds", "2", "--rows", "600", "--backends", "nvflare"),
        cpus="0",
    )
    assert re.search(rf"^ +8 +reference +- +{NUMBER} +{NUMBER} +{NUMBER} +0$", out, re.M), out
    assert re.search(rf"^ +8 +nvflare +6 +{NUMBER} +{NUMBER} +{NUMBER} +0$", out, re.M), out


@pytest.mark.ray
def test_flwr_cluster(tmp_path):
    out = bench(tmp_path, "flwr_cluster.py", "--clients", "2", "--rounds", "1", "--single-clients", "2")
    assert re.search(rf"^ +2 +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M), out
    assert re.search(
        rf"^one machine, 2 clients: reference {NUMBER} s, flwr {NUMBER} s, flwr/reference {NUMBER}$", out, re.M
    ), out


@pytest.mark.torch
@pytest.mark.ray
@pytest.mark.nvflare
def test_torch_rounds(tmp_path):
    pytest.importorskip("torch", reason="the torch tier needs the torch extra")
    out = bench(tmp_path, "torch_rounds.py", "--clients", "2", "--rounds", "2", "--cpus", "1")
    assert re.search(r", max \|dw\| vs reference 0$", out, re.M), out  # the CNN on every framework, bit for bit
    for run in ("reference", "flower", "nvflare"):
        assert re.search(rf"^{run} +{NUMBER} +{NUMBER} +1 +{NUMBER} +{NUMBER}%$", out, re.M), out


@pytest.mark.ray
@pytest.mark.nvflare
def test_bare_apps(tmp_path):
    """FLTest against the bare Flower App (flwr run) and NVFlare job (bench/bare/) and against its Flower simulation
    before flwr run, and the ClientApp's import against flwr.clientapp."""
    out = bench(tmp_path, "bare_apps.py", "--clients", "2", "--rounds", "2", "--repeat", "1", "--cpus", "1")
    assert re.search(rf"^clientapp import \(median of 5\): flwr\.clientapp {NUMBER} s, \S+ {NUMBER} s, ", out, re.M), (
        out
    )
    for mode in ("flower-simulation", "flower-before", "nvflare"):  # times, their ratios, both sides' peak memory
        assert re.search(rf"^{mode} +2( +{NUMBER}){{10}}$", out, re.M), out


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_hung_bare_job_is_killed_with_every_process_it_started(tmp_path):
    """bench/bare_apps.py kills a bare job past its timeout with its process group (NVFlare's simulator leaves
    workers otherwise), and says so (:class:`Hung`) so that the job is run again."""
    spec = importlib.util.spec_from_file_location("bare_apps", REPO / "bench" / "bare_apps.py")
    bare_apps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bare_apps)
    child = tmp_path / "child.pid"
    with pytest.raises(bare_apps.Hung, match="still running after 2 s"):
        bare_apps._run(["bash", "-c", f"sleep 300 & echo $! > {child}; wait"], tmp_path, timeout=2)
    pid = int(child.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), f"the job's child {pid} outlived it"
