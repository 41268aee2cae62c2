"""Benchmark: when a Ray cluster pays off: one node with one CPU against two nodes with one CPU each.

On the kit's Ray emulation (compose, the FLTest image), pinned to the host's CPUs 0 and 1, it runs one
Flower simulation of the CIFAR-shaped set (bench/data_scale.py's, ``--rows`` random 32x32x3 images,
Dirichlet 0.5, logreg) for every point of a grid of client counts (``--clients``) and local work
(``--epochs``: local epochs a round), twice: on the head alone (1 node, 1 CPU) and on the head and one
worker (2 nodes, 1 CPU each). Each run goes as ``fltest-deploy run`` sends it: the config's folder (config
and data set) staged in the head, ``fltest run`` there, the results copied back. A round's time is the median
of rounds 2..R from FLTest's recorder (round 1 also holds the start of the actors).

It prints the grid side by side with the speed-up, fits the round model of
:mod:`fltest.backends.flwr.cluster_payoff` to it (least squares, no negative term), prints its terms and
what it predicts for 1, 2, 4 and 8 nodes, the local work at which two nodes break even, and draws the grid and
the model in a PNG (``--plot``). Beside each point it shows what ``fltest run`` would say after the 2-node run
(the kit's model, ``MEASURED``: one line where one node is clearly faster). ``--json`` writes every measurement, so the model can be fitted again.
Needs the FLTest image (``fltest-deploy build``) and two host CPUs.
Run: ``python bench/cluster_payoff.py [--clients 4 20 120] [--epochs 1 10] [--rows 60000] [--rounds 4]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import astuple
from pathlib import Path

import numpy as np
import yaml
from data_scale import disk_dataset, make_source

from deploy.engine import docker_client
from deploy.images import IMAGE
from deploy.pki.ray_token import ensure_ray_token
from deploy.ray_emulation.project import RayEmulation
from deploy.ray_emulation.readiness import wait_until_ready
from deploy.ray_emulation.run_in_head import run_in_head
from fltest.backends.flwr.cluster_payoff import (
    MEASURED,
    RoundModel,
    Workload,
    clearly_faster_on_one_node,
    fit_round_model,
)
from fltest.config import load_config
from fltest.data.sources import split_sizes

PROJECT = "fltest-payoff"  # a project of the bench's own: a user's cluster is never touched
NODES = (1, 2)
READY_S = 300


def _config(clients: int, epochs: int, rounds: int) -> dict:
    return {
        "name": f"payoff-{clients}-{epochs}",
        "seed": 0,
        "clients": clients,
        **disk_dataset(Path("data")),  # relative to the config: staged with it
        "model": {"type": "logreg"},
        "training": {"rounds": rounds, "local_epochs": epochs, "batch_size": 32, "learning_rate": 0.05},
        "runs": [{"name": "flower", "framework": "flwr"}],
    }


def _config_folder(folder: Path, source: Path, config: dict) -> Path:
    """``folder`` with the config and a hard-linked copy of the data set (staged into the head as a user's is)."""
    folder.mkdir(parents=True)
    for path in source.rglob("*"):
        target = folder / "data" / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.hardlink_to(path)
    config_path = folder / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return config_path


def _round_seconds(results: Path, name: str) -> tuple[float, float]:
    """Round 1's seconds and the median of the later rounds' (FLTest's recorder)."""
    run_dir = results / name / "flower"
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary["status"] != "completed":
        raise RuntimeError(f"{name}: {summary.get('error')}")
    rounds = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rounds[0]["round_s"], statistics.median(r["round_s"] for r in rounds[1:])


def _emulation(nodes: int, token: Path) -> RayEmulation:
    """The head alone or the head and workers, one CPU each, each node pinned to a host CPU of its own."""
    return RayEmulation(
        name=PROJECT,
        overrides={
            "FLTEST_IMAGE": IMAGE,
            "RAY_WORKERS": str(nodes - 1),
            "RAY_HEAD_CPUS": "1",
            "RAY_WORKER_CPUS": "1",
            "RAY_HEAD_CPUSET": "0",
            "RAY_WORKER_CPUSET": "1",
            "RAY_TOKEN_FILE": str(token),
        },
    )


def measure(work: Path, rows: int, clients: list[int], epochs: list[int], rounds: int) -> list[dict]:
    """Every grid point on 1 node, then on 2; one dict a run: nodes, clients, epochs, samples, round seconds."""
    client = docker_client()
    ensure_ray_token(work / "ray_token")
    measured = []
    for nodes in NODES:
        project = _emulation(nodes, work / "ray_token")
        try:
            project.up(client)
            wait_until_ready(project, client, READY_S)
            head = project.head(client)
            for count in clients:
                for epoch_count in epochs:
                    config = _config(count, epoch_count, rounds)
                    folder = work / f"{nodes}-{count}-{epoch_count}"
                    config_path = _config_folder(folder, work / "source", config)
                    loaded = load_config(config_path)
                    samples, _ = split_sizes(rows, loaded.dataset)
                    exit_code = run_in_head(head, config_path, loaded, folder / "results")
                    if exit_code != 0:
                        raise RuntimeError(f"{config['name']} on {nodes} node(s): fltest exited {exit_code}")
                    first, later = _round_seconds(folder / "results", config["name"])
                    measured.append(
                        {
                            "nodes": nodes,
                            "clients": count,
                            "epochs": epoch_count,
                            "samples": samples,
                            "first_round_s": first,
                            "round_s": later,
                        }
                    )
                    print(
                        f"# {nodes} node(s), {count} clients, {epoch_count} epochs: {later:.2f} s a round", flush=True
                    )
        finally:
            project.down()
    return measured


def _workload(row: dict) -> Workload:
    return Workload(row["clients"], row["epochs"], row["samples"])


def break_even_epochs(model: RoundModel, clients: int, samples: int) -> float:
    """The local epochs at which two nodes take as long as one (0: two nodes are faster from the first epoch)."""
    one, two = (model.round_s(Workload(clients, 0, samples), nodes) for nodes in NODES)
    per_epoch_saved = model.round_s(Workload(clients, 1, samples), 1) - model.round_s(Workload(clients, 1, samples), 2)
    per_epoch_saved -= one - two
    return max(0.0, (two - one) / per_epoch_saved) if per_epoch_saved > 0 else float("inf")


def plot(measured: list[dict], model: RoundModel, path: Path) -> None:
    """One panel a local-work setting: round seconds against clients, measured (points) and modelled (lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = sorted({row["epochs"] for row in measured})
    samples = measured[0]["samples"]
    clients = sorted({row["clients"] for row in measured})
    figure, axes = plt.subplots(1, len(epochs), figsize=(5.5 * len(epochs), 4.2), squeeze=False)
    line = np.geomspace(min(clients), max(clients), 50)
    for axis, epoch_count in zip(axes[0], epochs):
        for nodes, colour in zip((1, 2, 4, 8), ("C0", "C1", "C2", "C3")):
            axis.plot(
                line,
                [model.round_s(Workload(int(n), epoch_count, samples), nodes) for n in line],
                color=colour,
                linestyle="-" if nodes in NODES else ":",
                label=f"model, {nodes} node(s)",
            )
            points = [row for row in measured if row["nodes"] == nodes and row["epochs"] == epoch_count]
            if points:
                axis.plot(
                    [row["clients"] for row in points],
                    [row["round_s"] for row in points],
                    "o",
                    color=colour,
                    label=f"measured, {nodes} node(s)",
                )
        axis.set_xscale("log")
        axis.set_xlabel("clients")
        axis.set_ylabel("seconds a round (median of rounds 2..R)")
        axis.set_title(f"{epoch_count} local epoch(s), {samples} samples in all")
        axis.grid(alpha=0.3)
        axis.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=8)
    figure.suptitle("One Ray node with one CPU against nodes of one CPU each (Flower, logreg, CIFAR-shaped)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    """Measure the grid (or read it from ``--from-json``), print it, fit the model, print and draw both."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 20, 120])
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--plot", type=Path, default=Path("cluster_payoff.png"))
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--from-json", type=Path, help="fit and draw these measurements instead of measuring")
    args = parser.parse_args()
    if args.from_json:
        measured = json.loads(args.from_json.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="fltest-bench-payoff-") as tmp:
            work = Path(tmp)
            start = time.monotonic()
            make_source(work / "source", args.rows)
            print(f"# {args.rows} CIFAR-shaped rows written in {time.monotonic() - start:.1f} s", flush=True)
            measured = measure(work, args.rows, args.clients, args.epochs, args.rounds)
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1))

    model = fit_round_model([(_workload(row), row["nodes"], row["round_s"]) for row in measured])
    print("clients  epochs  1 node s  2 nodes s  speed-up  model 1 s  model 2 s  hint after the 2-node run")
    for row in measured:
        if row["nodes"] != 1:
            continue
        two = next(
            r for r in measured if r["nodes"] == 2 and r["clients"] == row["clients"] and r["epochs"] == row["epochs"]
        )
        work = _workload(row)
        hint = clearly_faster_on_one_node(MEASURED, work, 2, two["round_s"])
        print(
            f"{row['clients']:7d}  {row['epochs']:6d}  {row['round_s']:8.2f}  {two['round_s']:9.2f}"
            f"  {row['round_s'] / two['round_s']:7.2f}x  {model.round_s(work, 1):9.2f}  {model.round_s(work, 2):9.2f}"
            f"  {f'one node: {hint:.2f} s' if hint else '-'}"
        )
    print("model term            seconds")
    for name, value in zip(RoundModel.__dataclass_fields__, astuple(model)):
        print(f"{name:20s}  {value:.3g}")
    samples = measured[0]["samples"]
    print("clients  epochs  predicted s on 1 / 2 / 4 / 8 nodes")
    for count in sorted({row["clients"] for row in measured}):
        for epoch_count in sorted({row["epochs"] for row in measured}):
            work = Workload(count, epoch_count, samples)
            predicted = " / ".join(f"{model.round_s(work, nodes):.2f}" for nodes in (1, 2, 4, 8))
            print(f"{count:7d}  {epoch_count:6d}  {predicted}")
    for count in sorted({row["clients"] for row in measured}):
        print(
            f"break-even, {count} clients: two nodes pay off above {break_even_epochs(model, count, samples):.2f} local epochs"
        )
    plot(measured, model, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
