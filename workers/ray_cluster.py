"""Ray nodes on this machine, started with `ray start --block`, for tests, benches and demos.

`NodeGroup` starts a head and worker nodes as child processes, each in its own process
group and temp dir, all with one auth token; `stop` ends only those nodes (never
`ray stop`, which would end every Ray process on the machine). Linux only: it finds a
node's raylet through /proc, so a test can kill it mid-trial.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 120.0
_PROCESS_TOKEN = secrets.token_hex(32)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_token() -> str:
    """One random token for every cluster this process starts. Ray caches the token a
    process first authenticates with, so a later cluster must use the same one."""
    return _PROCESS_TOKEN


def auth_env(token: str | None = None) -> dict[str, str]:
    """The variables every node and driver of a token-authenticated cluster needs. A driver
    sets them before its first `ray.init`; a test sets them with monkeypatch."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token or process_token()}


@dataclass
class Node:
    """One `ray start --block` process; its raylet, workers and agents hang below it."""

    name: str
    proc: subprocess.Popen
    temp_dir: Path
    resources: dict[str, float]

    def raylet_pid(self) -> int | None:
        """The pid of this node's raylet, or None once it is gone."""
        for pid in _descendants(self.proc.pid):
            if _comm(pid) == "raylet":
                return pid
        return None

    def running_tasks(self, name_prefix: str) -> int:
        """How many Ray workers of this node run a task whose name starts with `name_prefix`
        (a busy worker's process title is `ray::<task name>`)."""
        title = f"ray::{name_prefix}"
        return sum(1 for pid in _descendants(self.proc.pid) if _cmdline(pid).startswith(title))

    def kill_raylet(self) -> int:
        """SIGKILL this node's raylet, as a lost node; returns its pid."""
        pid = self.raylet_pid()
        if pid is None:
            raise LookupError(f"node {self.name} has no raylet running")
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self, *, grace_s: float = 3.0) -> None:
        """End this node: its process group and every process below it (workers have their own groups)."""
        pids = _descendants(self.proc.pid)
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        pids |= _descendants(self.proc.pid)
        _signal_group(self.proc.pid, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


@dataclass
class NodeGroup:
    """A cluster of `ray start` nodes on this machine with one token. Use as a context manager."""

    token: str = field(default_factory=process_token)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")))
    nodes: list[Node] = field(default_factory=list)
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
        env.update(auth_env(self.token), RAY_USAGE_STATS_ENABLED="0")
        return env

    def start_head(self, *, num_cpus: float = 1, resources: dict[str, float] | None = None) -> Node:
        """Start the head node and wait until it accepts nodes and drivers."""
        self.port = free_port()
        return self._start("head", ["--head", "--port", str(self.port), "--include-dashboard", "false",
                                    "--dashboard-host", "127.0.0.1", "--dashboard-port", str(free_port())],
                           num_cpus=num_cpus, resources=resources or {})

    def add_node(self, name: str, *, num_cpus: float = 1, resources: dict[str, float] | None = None) -> Node:
        """Start a worker node joining the head. Call `wait_for_nodes` before placing work on it."""
        return self._start(name, ["--address", self.address], num_cpus=num_cpus, resources=resources or {})

    def wait_for_nodes(self, count: int, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until the connected driver sees `count` alive nodes (call after `ray.init`)."""
        import ray

        deadline = time.monotonic() + timeout_s
        while sum(1 for n in ray.nodes() if n.get("Alive")) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {count} Ray nodes alive after {timeout_s:g} s; logs in {self.root}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the nodes this group started (workers first), then remove its temp dirs."""
        for node in reversed(self.nodes):
            node.stop()
        self.nodes.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "NodeGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, name: str, args: list[str], *, num_cpus: float, resources: dict[str, float]) -> Node:
        temp_dir = self.root / name
        temp_dir.mkdir(parents=True)
        out = temp_dir / "start.out"
        ray_cli = str(Path(sys.executable).with_name("ray"))
        cmd = [ray_cli, "start", "--block", *args, "--num-cpus", str(num_cpus),
               "--resources", json.dumps(resources), "--temp-dir", str(temp_dir),
               "--object-store-memory", str(80 * 2**20), "--disable-usage-stats"]
        with open(out, "w") as handle:
            proc = subprocess.Popen(cmd, env=self.env(), stdout=handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        node = Node(name, proc, temp_dir, resources)
        self.nodes.append(node)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ray runtime started" not in out.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = out.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"ray start for node {name} failed or timed out:\n{tail}")
            time.sleep(0.2)
        return node


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
