"""Platform-aware placement on Ray: each node advertises the platforms it can measure for.

A node advertises a custom Ray resource named from its platform key,
`tuner_platform_<key>`, with `PLATFORM_UNITS` units. A trial for that platform asks
for `TRIAL_UNITS` of it, so Ray runs it only on such a node; the tiny fraction never
limits how many trials a node takes (the executor's capacity and CPU shares do).

Start a worker node for this machine's platform with:

    ray start --address HEAD:PORT --resources "$(python -m tuner.workers.placement)"

Ray is imported lazily, inside the functions that need a connected cluster.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.platform import Platform

RESOURCE_PREFIX = "tuner_platform_"
PLATFORM_UNITS = 1.0       # what a node advertises per platform
TRIAL_UNITS = 0.001        # what one trial asks for: up to 1000 trials per node, never the bottleneck


def platform_resource(platform_key: str) -> str:
    """The Ray resource name a node of `platform_key` advertises."""
    return f"{RESOURCE_PREFIX}{platform_key}"


def platform_of_resource(resource: str) -> str | None:
    """The platform key a resource name stands for, or None for any other resource."""
    if resource.startswith(RESOURCE_PREFIX) and len(resource) > len(RESOURCE_PREFIX):
        return resource[len(RESOURCE_PREFIX):]
    return None


def trial_resources(platform_key: str) -> dict[str, float]:
    """The custom resources a trial for `platform_key` requests (`.options(resources=...)`)."""
    return {platform_resource(platform_key): TRIAL_UNITS}


def local_node_resources(device: str = "cpu", *, threads: int | None = None) -> dict[str, float]:
    """The resources this machine's node advertises: its platform for `device` and `threads`.

    Pass the result to `ray.init(resources=...)` or, as JSON, to `ray start --resources`.
    The key is `tuner.platform.current_platform(device, threads=threads).key`, so it matches
    the key a driver on this machine tunes for with the same device and thread count.
    """
    from tuner.platform import current_platform

    return {platform_resource(current_platform(device, threads=threads).key): PLATFORM_UNITS}


def platforms_in(node_resources: list[dict[str, float]]) -> dict[str, int]:
    """Platform key -> number of nodes advertising it, from per-node resource dicts."""
    counts: dict[str, int] = {}
    for resources in node_resources:
        for name in resources:
            key = platform_of_resource(name)
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
    return counts


def why_unplaceable(nodes: list[dict[str, float]], platform_key: str | None, *, gpu: bool = False) -> str | None:
    """Why none of `nodes` (the alive nodes' resources) can run a trial for `platform_key` (None: any
    node) that holds a whole GPU when `gpu`: none advertises the platform, or none of those has a GPU.
    One line naming the fix; None where a node can. Ray would otherwise keep such a trial waiting, silently."""
    fits = nodes if platform_key is None else [n for n in nodes if platform_resource(platform_key) in n]
    if platform_key is not None and not fits:
        present = ", ".join(sorted(platforms_in(nodes))) or "none"
        return (f"no node of the Ray cluster advertises platform {platform_key} (resource "
                f"{platform_resource(platform_key)}); platforms present: {present}. Start a node on that hardware "
                f"with: ray start --address ADDRESS --resources \"$(python -m tuner.workers.placement)\"")
    if gpu and not any(n.get("GPU", 0.0) >= 1 for n in fits):
        which = "of the Ray cluster" if platform_key is None else f"advertising platform {platform_key}"
        return (f"no alive node {which} has a GPU for Ray to give, and each trial of a CUDA search holds one; "
                f"start a GPU node with: ray start --address ADDRESS --num-gpus N "
                f"--resources \"$(python -m tuner.workers.placement --device cuda)\"")
    return None


def cluster_platforms() -> dict[str, int]:
    """The platforms the connected Ray cluster can run trials for: key -> alive nodes.

    Call after `ray.init` (a `RayExecutor` has done it). An empty dict means no node
    advertises a platform: start nodes with the resources `local_node_resources` gives.
    """
    import ray

    return platforms_in([node["Resources"] for node in ray.nodes() if node.get("Alive")])


def describe_platform(platform_key: str, *, timeout_s: float = 120.0) -> "Platform":
    """The full `Platform` of a key some node advertises, computed on such a node.

    A driver tuning for another node's platform (`--platform KEY`) needs its hardware and
    software parts to store it. Runs one short Ray task on a node of that platform, which
    recomputes its platforms for each device and thread count until the key matches.
    Raises LookupError when no node advertises the key or none of its platforms matches.
    """
    import ray

    from tuner.platform import platform_from_parts

    if platform_key not in cluster_platforms():
        raise LookupError(f"no node of the Ray cluster advertises platform {platform_key}")
    # max_calls=1: the worker that imported torch for this exits, rather than idling at its size
    task = ray.remote(max_calls=1, num_cpus=0, resources=trial_resources(platform_key), max_retries=0)(_platform_parts)
    parts = ray.get(task.remote(platform_key), timeout=timeout_s)
    if parts is None:
        raise LookupError(f"the node advertising platform {platform_key} computes no platform with that key; "
                          f"restart it with the resources from: python -m tuner.workers.placement")
    return platform_from_parts(parts["device"], parts["hardware"], parts["software"])


def _platform_parts(platform_key: str) -> dict | None:
    """Runs on a Ray node: this node's platform with `platform_key`, as plain parts."""
    import os

    import torch

    from tuner.platform import current_platform

    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    for device in devices:
        for threads in range(1, (os.cpu_count() or 1) + 1) if device == "cpu" else [None]:
            found = current_platform(device, threads=threads)
            if found.key == platform_key:
                return {"device": found.device, "hardware": dict(found.hardware), "software": dict(found.software)}
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m tuner.workers.placement`: print this node's resources as JSON for `ray start`."""
    parser = argparse.ArgumentParser(prog="python -m tuner.workers.placement",
                                     description="Print the Ray resources this machine advertises as a tuner node.")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads the trials measure with (default: torch's default)")
    args = parser.parse_args(argv)
    print(json.dumps(local_node_resources(args.device, threads=args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
