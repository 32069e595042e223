"""Spare trial processes: interpreters started ahead of their trial, so it does not pay the imports.

A spare is `python -m tuner.workers.trial_process --spare PARENT`, spawned (never forked) in its
own session, with its own folder under the pool's root as working directory (the local
executor's `cancel`/`close` find processes by that folder). It asks for SIGKILL when its parent
dies, imports torch, Dynamo, Inductor and the trial code in steps, each under the node's compile
lock held shared (so never during a timed section, which waits for one step only), and blocks
reading its stdin. It has run nothing else: no model, no tensor op, no CUDA call, no thread pool.
`isolation.run_job` writes the job into its folder and the job's paths to its stdin; from then on
it is that job's trial process, exactly like a cold one.

A spare's environment is fixed when it starts, so a job takes only a spare started with the
environment it would have had itself (`env_key`); otherwise the job starts cold. Taking a spare
starts its replacement at once.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

SPARE_FLAG = "--spare"      # trial_process's argument: wait for a job on stdin


def env_key(env: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The environment a process started with `env` gets (None: this process's), as a key."""
    return tuple(sorted((os.environ if env is None else env).items()))


@dataclass(frozen=True)
class Spare:
    """One waiting process: its folder (its working directory), its stderr file and its environment."""

    proc: subprocess.Popen
    folder: Path
    stderr: IO[str]
    key: tuple[tuple[str, str], ...]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL its process group, reap it, remove its folder."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.discard()

    def discard(self) -> None:
        """Close our ends of its pipes and remove its folder (after its process ended)."""
        for handle in (self.proc.stdin, self.stderr):
            try:
                handle.close()
            except (OSError, AttributeError):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


class SparePool:
    """At most `size` spares, started in folders under `root` (made if missing).

    Thread-safe: the local executor's threads take from one pool. `close` kills every spare; a
    spare also dies with the thread that started it (Linux's parent-death signal).
    """

    def __init__(self, root: str, *, size: int = 1):
        self.root, self.size = root, size
        self._spares: list[Spare] = []
        self._lock = threading.Lock()
        self._closed = False

    def fill(self, env: Mapping[str, str] | None) -> None:
        """Start spares for `env` until `size` wait (spares for other environments are killed to make room)."""
        key = env_key(env)
        with self._lock:
            self._drop_dead()
            while not self._closed and sum(s.key == key for s in self._spares) < self.size:
                if len(self._spares) >= self.size:
                    self._spares.pop(0).kill()
                self._spares.append(self._start(env, key))

    def take(self, env: Mapping[str, str] | None) -> Spare | None:
        """A live spare started with exactly `env` (None: this process's), now the caller's, with
        its replacement started; None when there is none (the caller starts a cold process)."""
        key = env_key(env)
        with self._lock:
            self._drop_dead()
            spare = next((s for s in self._spares if s.key == key), None)
            if spare is not None:
                self._spares.remove(spare)
        self.fill(env)
        return spare

    def close(self) -> None:
        """Kill every waiting spare; none starts after this."""
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
        for spare in spares:
            spare.kill()

    def _drop_dead(self) -> None:
        for spare in [s for s in self._spares if not s.alive()]:     # killed by cancel, or crashed importing
            self._spares.remove(spare)
            spare.proc.wait()
            spare.discard()

    def _start(self, env: Mapping[str, str] | None, key: tuple[tuple[str, str], ...]) -> Spare:
        os.makedirs(self.root, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="tuner-spare-", dir=self.root))
        stderr = open(folder / "stderr.txt", "w+")
        proc = subprocess.Popen([sys.executable, "-m", "tuner.workers.trial_process", SPARE_FLAG, str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr, cwd=folder,
                                env=None if env is None else dict(env), start_new_session=True, text=True)
        return Spare(proc, folder, stderr, key)


_PROCESS_POOL: SparePool | None = None


def process_spares() -> SparePool:
    """This process's own pool of one spare (made on first use): a Ray worker process keeps its spare
    between the tasks Ray runs in it. Closed, with its folder removed, when the process exits;
    if it is killed instead, its spare dies with it (the parent-death signal)."""
    global _PROCESS_POOL
    if _PROCESS_POOL is None:
        import atexit

        pool = SparePool(tempfile.mkdtemp(prefix="tuner-spares-"), size=1)
        atexit.register(lambda: (pool.close(), shutil.rmtree(pool.root, ignore_errors=True)))
        _PROCESS_POOL = pool
    return _PROCESS_POOL
