"""Print the cluster's live Ray nodes as JSON; run inside the head (it joins the cluster as a driver)."""

from __future__ import annotations

import json
import os
import sys

from deploy.node.ray_start import NODE_START_LABEL


def live_nodes(address: str) -> list[dict]:
    """Hostname, IP, CPUs, GPUs, Ray node id and start label (:data:`NODE_START_LABEL`) of every live node at ``address``."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        return [
            {
                "hostname": n["NodeManagerHostname"],
                "ip": n["NodeManagerAddress"],
                "cpus": n["Resources"].get("CPU", 0.0),
                "gpus": n["Resources"].get("GPU", 0.0),
                "node_id": n["NodeID"],
                "start": (n.get("Labels") or {}).get(NODE_START_LABEL, ""),
            }
            for n in ray.nodes()
            if n["Alive"]
        ]
    finally:
        ray.shutdown()


def main() -> None:
    """``python -m deploy.node.list_ray_nodes [address]`` (default: ``FLTEST_RAY_ADDRESS``)."""
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ["FLTEST_RAY_ADDRESS"]
    print(json.dumps(live_nodes(address)))


if __name__ == "__main__":
    main()
