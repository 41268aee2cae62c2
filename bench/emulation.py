"""Benchmark: the compose emulation's start-up, image sizes and a code-change rebuild.

Measured side by side in one run, on this Docker host:
- time from ``up`` to a ready cluster (head + 2 workers, Ray reporting 3 nodes and 3 CPUs),
  and from ``down`` to nothing left, over ``--repeat`` cycles;
- the sizes of the base and FLTest images;
- the time to rebuild the FLTest image with no change, and after a one-line change in
  fltest's code (a copy of the tree, so the checkout is untouched), and their ratio.
Needs the images (``fltest-deploy build``). Run: ``python bench/emulation.py [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import docker

from deploy.images import DEFAULT_BASE_IMAGE, IMAGE, build_fltest_image, copy_build_context, remove_build
from deploy.pki.ray_token import ensure_ray_token
from deploy.ray_emulation.project import RayEmulation
from deploy.ray_emulation.readiness import wait_until_ready

BENCH_TAG = "fltest:bench"


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _up_and_down(client, repeat: int) -> tuple[list[float], list[float]]:
    """Seconds from up to ready, and of down, for ``repeat`` cycles of a bench-only project."""
    with tempfile.TemporaryDirectory() as secrets:
        token = Path(secrets) / "ray_token"
        ensure_ray_token(token)
        project = RayEmulation(
            name="fltest-bench",
            overrides={
                "FLTEST_IMAGE": IMAGE,
                "RAY_WORKERS": "2",
                "RAY_HEAD_CPUS": "1",
                "RAY_WORKER_CPUS": "1",
                "RAY_TOKEN_FILE": str(token),
            },
        )
        ups, downs = [], []
        try:
            for _ in range(repeat):
                ups.append(_timed(lambda: (project.up(client), wait_until_ready(project, client, 300))))
                downs.append(_timed(project.down))
        finally:
            project.down()
    return ups, downs


def _build_seconds(client, context: Path) -> float:
    """Seconds to build ``fltest:bench`` from ``context`` as ``fltest-deploy build`` does (stage by stage)."""
    return _timed(lambda: build_fltest_image(client, tag=BENCH_TAG, context=context, report=lambda line: None))


def main() -> None:
    """Print the measurements as a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    client = docker.from_env()

    with tempfile.TemporaryDirectory() as tree:
        context = copy_build_context(Path(tree))
        _build_seconds(client, context)  # warm the cache for this context
        unchanged = _build_seconds(client, context)
        with (context / "fltest" / "__init__.py").open("a") as handle:
            handle.write("# a one-line change\n")
        changed = _build_seconds(client, context)
    remove_build(client, BENCH_TAG)
    ups, downs = _up_and_down(client, args.repeat)

    print(f"{'measure':44} {'value':>10}")
    for tag in (DEFAULT_BASE_IMAGE, IMAGE):
        print(f"{'image size ' + tag:44} {client.images.get(tag).attrs['Size'] / 1e6:>8.0f} MB")
    print(f"{'rebuild, no change':44} {unchanged:>9.1f}s")
    print(f"{'rebuild, one-line change in fltest/':44} {changed:>9.1f}s")
    print(f"{'  ratio change / no change':44} {changed / unchanged:>9.2f}x")
    for i, (up, down) in enumerate(zip(ups, downs), 1):
        print(f"{f'up -> ready (head + 2 workers), cycle {i}':44} {up:>9.1f}s")
        print(f"{f'down -> nothing left, cycle {i}':44} {down:>9.1f}s")


if __name__ == "__main__":
    main()
