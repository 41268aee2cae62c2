"""Benchmark: preparing shards of a CIFAR-10-sized set, against a plain ``save_to_disk`` of the same data.

Makes a CIFAR-10-shaped set on disk (no download: ``--rows`` random 32x32x3 uint8 images, 10
classes, an ``Array3D`` column, written with ``save_to_disk``), then measures, each side in a
process of its own (peak resident memory: the process's own ``VmHWM``, which it reports as it ends; the
rusage that ``wait4`` returns would be at least this process's size, which the child's address space
had until it ran ``exec``):

- ``save``: load the set and ``save_to_disk`` it again, whole (what writing the data once costs);
- ``prepare``: ``prepare_shards`` for ``--clients`` clients (Dirichlet, alpha 0.5), cold cache.

It prints the two side by side (time, peak RSS, ratio), the shards' bytes against the source's,
and what one client's shard costs in Ray's object store (``memory`` variant) against the float32
rows of FLTest's first shard format. Then, on a 2-node local Ray cluster (head + one node, one
CPU and a 200 MB object store each, spilling into a folder of its own), the flwr run with
object-store shards against one whose clients read their shards from the driver's cache folder (what
a shared filesystem would give): wall time, the pickled ClientApp, bytes Ray spilled. (A ClientApp
that closes over every client's shard, which Flower would pickle with every message, cannot be
written any more: ``flwr run`` ships the App as source.) Each run is a process of its own, stopped,
and printed as "exceeded", once Ray has spilled ``--spill-limit-gb`` or it has run ``--time-limit``
seconds, so the benchmark never fills the disk.
Run: ``python bench/data_scale.py [--rows 60000] [--clients 120] [--no-ray]``.
Targets (issue #16): prepare <= 2x the plain save, peak RSS <= 2x the source's Arrow size,
object-store shards <= 1/4 of float32 rows.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CLASSES = 10
SHAPE = (32, 32, 3)


def make_source(folder: Path, rows: int, seed: int = 0, batch: int = 5_000) -> int:
    """Write the CIFAR-shaped set with ``save_to_disk`` (built in batches, never whole in memory); its bytes."""
    import datasets

    features = datasets.Features(
        {"img": datasets.Array3D(shape=SHAPE, dtype="uint8"), "label": datasets.ClassLabel(num_classes=CLASSES)}
    )

    def batches():
        rng = np.random.default_rng(seed)
        for start in range(0, rows, batch):
            count = min(batch, rows - start)
            images = rng.integers(0, 256, size=(count, *SHAPE), dtype=np.uint8)
            for image, label in zip(images, rng.integers(0, CLASSES, size=count)):
                yield {"img": image, "label": int(label)}

    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="fltest-bench-gen-") as cache:
        dataset = datasets.Dataset.from_generator(batches, features=features, cache_dir=cache)
        dataset.save_to_disk(str(folder))
    return _bytes(folder)


def _bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*.arrow"))


def disk_dataset(source: Path) -> dict:
    """The ``dataset`` and ``partition`` sections of a config of the set :func:`make_source` wrote in ``source``."""
    return {
        "dataset": {
            "source": "disk",
            "path": str(source),
            "features": ["img"],
            "label": "label",
            "scale": 255.0,
            "test_fraction": 1 / 6,
        },
        "partition": {"method": "dirichlet", "alpha": 0.5, "min_samples_per_client": 10},
    }


def _config(source: Path, clients: int):
    from fltest.config.schema import ExperimentConfig

    return ExperimentConfig.model_validate(
        {
            "name": "bench-data-scale",
            "seed": 0,
            "clients": clients,
            **disk_dataset(source),
            "training": {"rounds": 1, "local_epochs": 1},
            "runs": [{"name": "reference", "framework": "reference"}],
        }
    )


def peak_resident_bytes() -> int:
    """This process's peak resident memory since it started its program (``VmHWM``; not inherited across ``exec``)."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024


def side(name: str, source: Path, out: Path, clients: int) -> None:
    """One measured side, in this process: ``save`` or ``prepare``; its peak resident bytes go to ``out/<name>.peak``."""
    import datasets

    datasets.disable_progress_bars()
    if name == "save":
        datasets.load_from_disk(str(source)).save_to_disk(str(out / "copy"))
    else:
        from fltest.data.shard_cache import prepare_shards

        prepare_shards(_config(source, clients), "mmap")
    (out / f"{name}.peak").write_text(str(peak_resident_bytes()))


def measure(name: str, source: Path, out: Path, clients: int) -> tuple[float, int]:
    """Run one side in a child process; its wall seconds and peak resident bytes."""
    env = {**os.environ, "HF_HOME": str(out / "hf"), "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--side",
            name,
            "--source",
            str(source),
            "--out",
            str(out),
            "--clients",
            str(clients),
        ],
        env=env,
    )
    returncode = child.wait()
    elapsed = time.perf_counter() - start
    if returncode != 0:
        raise SystemExit(f"{name}: exit {returncode}")
    return elapsed, int((out / f"{name}.peak").read_text())


def object_store_sizes(hf_home: Path, source: Path, clients: int) -> tuple[int, int, int]:
    """Pickled bytes of client 0's in-memory shard (what Ray's object store holds), of the same rows as
    float32 (the first shard format), and of a naive app's closure over every client's float64 arrays."""
    os.environ["HF_HOME"] = str(hf_home)
    import datasets

    datasets.config.HF_DATASETS_CACHE = hf_home / "datasets"
    from fltest.data.shard_cache import prepare_shards
    from fltest.data.shards import client_dataset

    shards, _ = prepare_shards(_config(source, clients), "memory")
    shard = client_dataset(shards, 0)
    stored = len(pickle.dumps(shard.data.table))  # what fltest.backends.flwr.cluster.put_shards puts
    float32_rows = shard.num_rows * int(np.prod(SHAPE)) * 4
    naive = sum(x.nbytes + y.nbytes for x, y in (shards.client_arrays(i) for i in range(shards.num_clients)))
    return stored, float32_rows, naive


RAY_OBJECT_STORE_BYTES = 200 * 1024**2


def flwr_run(variant: str, source: Path, out: Path, clients: int, rounds: int) -> None:
    """One flwr run on the cluster at ``FLTEST_RAY_ADDRESS``, in this process: ``ours`` or ``folder``."""
    import datasets

    datasets.disable_progress_bars()
    sys.path.insert(0, str(REPO))
    from bench.flwr_cluster import SharedFolderFlwrBackend
    from fltest.backends.flwr.backend import FlwrBackend
    from fltest.config.schema import ExperimentConfig
    from fltest.runner import run_experiment

    data = _config(source, clients).model_dump(mode="json")
    data.update(
        name=f"bench-{variant}",
        runs=[{"name": "flwr", "framework": "flwr"}],
        total_cpus=2,
        training={"rounds": rounds, "local_steps": 5, "batch_size": 32, "learning_rate": 0.01, "round_timeout_s": 600},
    )
    backend = SharedFolderFlwrBackend() if variant == "folder" else FlwrBackend()
    run_experiment(ExperimentConfig.model_validate(data), out, backend_of=lambda run: backend)


def _spilled_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def ray_comparison(work: Path, source: Path, clients: int, rounds: int, spill_limit: float, time_limit: float) -> None:
    """Both flwr runs on one 2-node local cluster, side by side, each bounded."""
    from ray.cluster_utils import Cluster

    spill = work / "spill"
    system = {"object_spilling_config": json.dumps({"type": "filesystem", "params": {"directory_path": str(spill)}})}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "object_store_memory": RAY_OBJECT_STORE_BYTES,
            "_system_config": system,
        },
    )
    rows = []
    try:
        cluster.add_node(num_cpus=1, object_store_memory=RAY_OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        for variant in ("ours", "folder"):
            before = _spilled_bytes(spill)
            out = work / "runs" / variant
            env = {
                **os.environ,
                "HF_HOME": str(work / "memory"),
                "PYTHONPATH": str(REPO),
                "FLTEST_RAY_ADDRESS": cluster.address,
            }
            command = [
                sys.executable,
                __file__,
                "--flwr-run",
                variant,
                "--source",
                str(source),
                "--out",
                str(out),
                "--clients",
                str(clients),
                "--rounds",
                str(rounds),
            ]
            start = time.perf_counter()
            child = subprocess.Popen(
                command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            exceeded = ""
            while child.poll() is None:
                time.sleep(2)
                spilled = _spilled_bytes(spill) - before
                if spilled > spill_limit * 1e9:
                    exceeded = f"exceeded: spilled {spilled / 1e9:.1f} GB"
                elif time.perf_counter() - start > time_limit:
                    exceeded = f"exceeded: {time_limit:.0f} s"
                if exceeded:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
            elapsed, spilled = time.perf_counter() - start, _spilled_bytes(spill) - before
            summary_path = out / f"bench-{variant}" / "flwr" / "summary.json"
            summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
            app = summary.get("client_app_pickled_bytes")
            status = exceeded or summary.get("status", f"exit {child.returncode}")
            rows.append((variant, elapsed, app, spilled, status))
            print(f"  {variant}: {status} after {elapsed:.0f} s", flush=True)
    finally:
        cluster.shutdown()
    print(f"\n2-node local Ray cluster, {clients} clients, {rounds} rounds (200 MB object store a node):")
    print(f"{'shards':12} {'wall s':>8} {'pickled app':>14} {'Ray spilled':>12}  status")
    for variant, elapsed, app, spilled, status in rows:
        size = f"{app / 1e6:.2f} MB" if app else "-"
        print(f"{variant:12} {elapsed:8.0f} {size:>14} {spilled / 1e9:10.2f} GB  {status}")


def main() -> None:
    """Make the set, measure both sides, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--clients", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true", help="skip the 2-node Ray comparison")
    parser.add_argument("--spill-limit-gb", type=float, default=5.0, help="stop a run past this much spilled")
    parser.add_argument("--time-limit", type=float, default=600.0, help="stop a run past this many seconds")
    parser.add_argument("--side", choices=["save", "prepare"], help=argparse.SUPPRESS)
    parser.add_argument("--flwr-run", choices=["ours", "folder"], help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side(args.side, args.source, args.out, args.clients)
        return
    if args.flwr_run:
        flwr_run(args.flwr_run, args.source, args.out, args.clients, args.rounds)
        return
    with tempfile.TemporaryDirectory(prefix="fltest-bench-data-") as tmp:
        work = Path(tmp)
        print(f"making a CIFAR-10-shaped set: {args.rows} x 32x32x3 uint8 ...", flush=True)
        source_bytes = make_source(work / "source", args.rows)
        pixels = args.rows * int(np.prod(SHAPE))
        save_s, save_rss = measure("save", work / "source", work / "save", args.clients)
        prep_s, prep_rss = measure("prepare", work / "source", work / "prepare", args.clients)
        shard_root = next((work / "prepare" / "hf" / "datasets" / "fltest-shards").iterdir())
        shard_bytes = _bytes(shard_root)
        stored, float32_rows, naive = object_store_sizes(work / "memory", work / "source", args.clients)
        print(
            f"\nsource: {args.rows} images, {pixels / 1e6:.0f} MB of pixels, {source_bytes / 1e6:.0f} MB as Arrow (Array3D)"
        )
        print(f"{'':34} {'plain save_to_disk':>20} {'prepare_shards':>16} {'ratio':>7}")
        print(f"{'wall time (s)':34} {save_s:20.1f} {prep_s:16.1f} {prep_s / save_s:7.2f}")
        print(
            f"{'peak resident memory (MB)':34} {save_rss / 1e6:20.0f} {prep_rss / 1e6:16.0f} {prep_rss / save_rss:7.2f}"
        )
        print(f"peak RSS of prepare / source Arrow bytes: {prep_rss / source_bytes:.2f} (target <= 2)")
        print(
            f"shard bytes / source bytes: {shard_bytes / 1e6:.0f} MB / {source_bytes / 1e6:.0f} MB = {shard_bytes / source_bytes:.2f}"
        )
        print(
            f"client 0 in Ray's object store: {stored / 1e6:.2f} MB pickled; as float32 rows {float32_rows / 1e6:.2f} MB "
            f"(ratio {stored / float32_rows:.2f}, target <= 0.25)"
        )
        print(
            f"a naive ClientApp closing over every client's float64 arrays holds {naive / 1e9:.2f} GB, pickled with every message"
        )
        print(
            f"peak RSS of this process (generation and the object-store probe): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB"
        )
        if not args.no_ray:
            ray_comparison(work, work / "source", args.clients, args.rounds, args.spill_limit_gb, args.time_limit)


if __name__ == "__main__":
    main()
