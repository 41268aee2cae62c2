"""GPU check, for a machine that has an NVIDIA GPU: the CNN example on a one-GPU emulation, CPU against GPU.

The compose emulation with the PyTorch image (``fltest-deploy build --extras torch``), under its own project: the
head alone, ``--cpus`` CPUs and one GPU (an NVIDIA device request: the NVIDIA Container Toolkit and a driver for
the image's CUDA 13, 580 or newer). ``examples/digits_cnn.yaml`` then runs twice, each with the reference and Flower:
with ``total_gpus: 0`` (every client on the CPU) and with ``total_gpus: 1`` (each Flower client given 1/``--cpus`` of
the GPU, which it trains on), that run's tolerance ``--tolerance``. Printed, and written to ``--json``: each run's
median time per round, whether its clients trained on the GPU (a hook asks ``training_device()`` in each client),
its |Δw| from the CPU reference after every round, and its agreement with it (identical, within the tolerance, or
the first round beyond it). Nothing here is measured on these development machines: they have no GPU.
Run: ``python bench/gpu_check.py [--image fltest:0.1.0-torch] [--rounds 5] [--tolerance 1e-4]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import docker
import yaml

from deploy.images import IMAGE, variant_tag
from deploy.pki.ray_token import ensure_ray_token
from deploy.ray_emulation.project import RayEmulation
from deploy.ray_emulation.readiness import wait_until_ready
from deploy.ray_emulation.run_in_head import run_in_head
from fltest.config import load_config

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "digits_cnn.yaml"
PROJECT = "fltest-bench-gpu"  # apart from the tests' projects and the other benches'
# The example's hooks, plus one client metric: 1.0 where the client trained on the GPU (training_device()).
HOOKS = """\
from digits_hooks import after_local_training as _update_norm, evaluate_metrics  # noqa: F401
from fltest.model.torch_classifier import training_device


def after_local_training(partition_id, server_round, old_params, new_params):
    return {**_update_norm(partition_id, server_round, old_params, new_params), "on_gpu": float(training_device().type == "cuda")}
"""


def host_gpus() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists on this host (none: no driver, or no GPU)."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return []
    return [line for line in listing.stdout.splitlines() if line.startswith("GPU ")] if listing.returncode == 0 else []


def write_config(folder: Path, name: str, rounds: int, cpus: int, gpus: int, tolerance: float | None) -> Path:
    """The CNN example as ``name``, with the reference and Flower only, the round models kept for the comparison."""
    config = yaml.safe_load(EXAMPLE.read_text())
    config.update(name=name, total_cpus=cpus, total_gpus=gpus, hooks="gpu_check_hooks")
    config["training"]["rounds"] = rounds
    config["output"] = {"save_round_models": True}
    config["runs"] = [run for run in config["runs"] if run["framework"] in ("reference", "flwr")]
    if tolerance is not None:
        config["compare"] = {"tolerance": tolerance}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def summarize(experiment: Path, label: str) -> list[dict]:
    """Each run of ``experiment``: median seconds a round, share of client trainings on the GPU, |Δw| and agreement."""
    comparison = json.loads((experiment / "comparison.json").read_text())
    rows = []
    for row in comparison["runs"]:
        rounds = [json.loads(line) for line in (experiment / row["run"] / "metrics.jsonl").read_text().splitlines()][1:]
        rows.append(
            {
                "config": label,
                "run": row["run"],
                "status": row["status"],
                "median_round_s": statistics.median(r["round_s"] for r in rounds) if rounds else None,
                "on_gpu": statistics.mean(r["train"].get("on_gpu", 0.0) for r in rounds) if rounds else None,
                "param_diff_per_round": row.get("param_diff_per_round"),
                "agreement": row.get("agreement", "reference"),
                "tolerance": comparison["tolerance"],
            }
        )
    return rows


def main() -> None:
    """Bring the one-GPU emulation up, run both configs, print the table, take it down."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=variant_tag(IMAGE, ("torch",)))
    parser.add_argument("--cpus", type=int, default=2, help="the head's CPUs (default 2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-4, help="the GPU run's compare.tolerance (default 1e-4)")
    parser.add_argument("--json", type=Path, default=REPO / "results" / "bench-gpu-check.json")
    args = parser.parse_args()
    gpus = host_gpus()
    if not gpus:
        raise SystemExit(
            "bench/gpu_check.py: no GPU here (nvidia-smi -L lists none): run it on a machine with an NVIDIA GPU"
        )
    client = docker.from_env()
    folder = Path(tempfile.mkdtemp(prefix="fltest-bench-gpu-"))
    token = folder / "secrets" / "ray_token"
    ensure_ray_token(token)
    project = RayEmulation(
        name=PROJECT,
        overrides={
            "FLTEST_IMAGE": args.image,
            "RAY_WORKERS": "0",
            "RAY_HEAD_CPUS": str(args.cpus),
            "RAY_HEAD_GPUS": "1",
            "RAY_TOKEN_FILE": str(token),
        },
    )
    experiments = folder / "experiment"
    experiments.mkdir()
    for module in ("digits_cnn.py", "digits_hooks.py"):
        shutil.copy(EXAMPLE.parent / module, experiments / module)
    (experiments / "gpu_check_hooks.py").write_text(HOOKS)
    rows = []
    try:
        project.down()
        project.up(client)
        wait_until_ready(project, client, 300)
        for label, name, cpus_gpus, tolerance in (
            ("CPU", "gpu-check-cpu", (args.cpus, 0), None),
            ("GPU", "gpu-check-gpu", (args.cpus, 1), args.tolerance),
        ):
            path = write_config(experiments, name, args.rounds, *cpus_gpus, tolerance)
            code = run_in_head(project.head(client), path, load_config(path), folder / "results")
            if code != 0:
                raise SystemExit(f"bench/gpu_check.py: the {label} config's fltest run exited {code}")
            rows += summarize(folder / "results" / name, label)
    finally:
        project.down()
    print(f"{gpus[0]}; image {args.image}; head: {args.cpus} CPUs, 1 GPU; {args.rounds} rounds")
    print(
        f"{'config':6} {'run':10} {'median s/round':>15} {'on GPU':>7}  {'|dw| vs CPU reference, per round':34} agreement"
    )
    for row in rows:
        diffs = " ".join(f"{d:.1e}" for d in row["param_diff_per_round"] or []) or "-"
        on_gpu = "-" if row["on_gpu"] is None else f"{row['on_gpu']:.0%}"
        print(
            f"{row['config']:6} {row['run']:10} {row['median_round_s'] or 0:>15.2f} {on_gpu:>7}  {diffs:34} {row['agreement']}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"gpu": gpus[0], "image": args.image, "runs": rows}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
