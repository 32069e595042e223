"""Ray nodes on this machine for tests and benches, started with Ray's own `ray.cluster_utils.Cluster`.

`LocalCluster` starts a head and worker nodes as processes of this one, all with one auth
token, under a temp dir of its own: set `env()` (RAY_TMPDIR among it) before `start_head`,
because Cluster writes the cluster's address to RAY_TMPDIR/ray/ray_current_cluster, and under
the default /tmp/ray every other Ray driver on the machine would find it. `stop` ends only
these nodes (never `ray stop`, which would end every Ray process on the machine). Linux only:
it counts a node's busy workers through /proc.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 120.0
_PROCESS_TOKEN = secrets.token_hex(32)


def process_token() -> str:
    """One random token for every cluster this process starts. Ray caches the token a
    process first authenticates with, so a later cluster must use the same one."""
    return _PROCESS_TOKEN


def auth_env(token: str | None = None) -> dict[str, str]:
    """The variables every node and driver of a token-authenticated cluster needs. A driver
    sets them before its first `ray.init`; a test sets them with monkeypatch."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token or process_token()}


@dataclass
class LocalCluster:
    """A head and worker nodes on this machine with one token. Use as a context manager."""

    token: str = field(default_factory=process_token)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")))
    cluster: Any = None          # ray.cluster_utils.Cluster, once the head runs

    @property
    def address(self) -> str:
        return self.cluster.address

    def env(self) -> dict[str, str]:
        """Set these (with monkeypatch) before `start_head`: the token and this cluster's RAY_TMPDIR."""
        return {**auth_env(self.token), "RAY_TMPDIR": str(self.root), "RAY_USAGE_STATS_ENABLED": "0"}

    def start_head(self, *, num_cpus: float = 1, resources: dict[str, float] | None = None,
                   num_gpus: int = 0) -> Any:
        """Start the head node (a `ray._private.node.Node`) and wait until it accepts nodes and drivers.
        `num_gpus`: logical GPUs, which Ray assigns to tasks and names in their CUDA_VISIBLE_DEVICES."""
        from ray._raylet import Config
        from ray.cluster_utils import Cluster

        missing = {k: v for k, v in self.env().items() if os.environ.get(k) != v}
        if missing:
            raise RuntimeError(f"set LocalCluster.env() first; differs: {sorted(missing)}")
        Config.initialize("")   # Ray read RAY_AUTH_MODE when first imported; these nodes start in this process
        (self.root / "ray").mkdir(exist_ok=True)
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": num_cpus, "num_gpus": num_gpus, "resources": resources or {}, "include_dashboard": False})
        return self.cluster.head_node

    def add_node(self, *, num_cpus: float = 1, resources: dict[str, float] | None = None) -> Any:
        """Start a worker node joining the head. Call `wait_for_nodes` before placing work on it."""
        return self.cluster.add_node(num_cpus=num_cpus, resources=resources or {})

    def wait_for_nodes(self, count: int, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until the connected driver sees `count` alive nodes (call after `ray.init`)."""
        import ray

        deadline = time.monotonic() + timeout_s
        while sum(1 for n in ray.nodes() if n.get("Alive")) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {count} Ray nodes alive after {timeout_s:g} s; logs in {self.root}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the nodes this cluster started (workers first), then remove its temp dir.
        Call after `ray.shutdown()`: Ray refuses to remove the node a driver is connected to."""
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def raylet_pid(node: Any) -> int:
    """The pid of a node's raylet."""
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def running_tasks(node: Any, name_prefix: str) -> int:
    """How many Ray workers of `node` run a task whose name starts with `name_prefix`
    (a worker is a child of its node's raylet; a busy one's process title is `ray::<task name>`)."""
    title = f"ray::{name_prefix}"
    return sum(1 for pid in _children(raylet_pid(node)) if _cmdline(pid).startswith(title))


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == parent:
                found.append(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
