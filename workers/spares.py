"""Spare trial processes: forked ahead of their trial from a zygote that has imported, so the
trial pays neither the imports nor the fork.

Each pool keeps one zygote per environment (`workers/zygote.py`: spawned in its own session and
folder under the pool's root, where the local executor's `cancel`/`close` find it; it imports
torch, Dynamo, Inductor and the trial code under the node's compile lock held shared, then only
forks) and `size` spares forked from it, each in its own folder under the root, waiting on its
job FIFO. `isolation.run_job` writes the job into a spare's folder and the job's paths to its
FIFO; from then on it is that job's trial process, exactly like a spawned one.

A zygote's environment is fixed when it starts, so a job takes only a spare of a zygote started
with the environment it would have had itself (`env_key`); otherwise the job starts cold. Taking
a spare forks its replacement at once. A zygote that dies without forking anything (it could not
import) is not started again for that environment: its jobs start cold.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

from tuner.workers.zygote import Forked, Zygote

Key = tuple[tuple[str, str], ...]


def env_key(env: Mapping[str, str] | None) -> Key:
    """The environment a process started with `env` gets (None: this process's), as a key."""
    return tuple(sorted((os.environ if env is None else env).items()))


@dataclass(frozen=True)
class Spare:
    """One waiting process: its handle, its folder (its working directory), its stderr file, its environment."""

    proc: Forked
    folder: Path
    stderr: IO[str]
    key: Key

    def alive(self) -> bool:
        return self.proc.poll() is None

    def forked(self) -> bool:
        """Whether its zygote forked it (False: the zygote died first; nothing ran there)."""
        return self.proc.pid is not None

    def discard(self) -> None:
        """Close our ends of its FIFO and stderr and remove its folder. A spare still waiting reads
        the end of its FIFO and exits; one not yet forked finds no folder and exits."""
        for handle in (self.proc.stdin, self.stderr):
            try:
                handle.close()
            except OSError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


class SparePool:
    """At most `size` spares, forked in folders under `root` (made if missing).

    Thread-safe: the local executor's threads take from one pool. `close` kills every zygote (and
    so every spare and every trial forked from them); a zygote also dies with the thread that
    started it (Linux's parent-death signal), and its children with it.
    """

    def __init__(self, root: str, *, size: int = 1):
        self.root, self.size = root, size
        self._spares: list[Spare] = []
        self._zygotes: dict[Key, Zygote] = {}
        self._retired: list[Zygote] = []
        self._failed: set[Key] = set()      # environments whose zygote died before forking anything
        self._lock = threading.Lock()
        self._closed = False

    def fill(self, env: Mapping[str, str] | None) -> None:
        """Fork spares for `env` until `size` wait; the zygote and spares of other environments go
        (a retired zygote forks nothing more and exits once its running trials end)."""
        key = env_key(env)
        with self._lock:
            self._drop_dead()
            if self._closed or key in self._failed:
                return
            for other in [k for k in self._zygotes if k != key]:
                self._retired.append(self._zygotes.pop(other))
                self._retired[-1].retire()
            for spare in [s for s in self._spares if s.key != key]:
                self._spares.remove(spare)
                spare.discard()
            zygote = self._zygotes.get(key)
            if zygote is None:
                os.makedirs(self.root, exist_ok=True)
                zygote = self._zygotes[key] = Zygote(self.root, env)
            while len(self._spares) < self.size:
                self._spares.append(self._fork(zygote, key))

    def take(self, env: Mapping[str, str] | None) -> Spare | None:
        """A live spare of exactly `env` (None: this process's), now the caller's, with its
        replacement forked; None when there is none (the caller starts a cold process)."""
        key = env_key(env)
        with self._lock:
            self._drop_dead()
            spare = next((s for s in self._spares if s.key == key), None)
            if spare is not None:
                self._spares.remove(spare)
        self.fill(env)
        return spare

    def close(self) -> None:
        """Kill every zygote, with the spares and trials forked from it; none starts after this."""
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
            zygotes = [*self._zygotes.values(), *self._retired]
            self._zygotes, self._retired = {}, []
        for zygote in zygotes:
            zygote.kill()
        for spare in spares:
            spare.discard()

    def _drop_dead(self) -> None:
        # Zygotes first: reaping one ends the handles of the spares it forked.
        for key, zygote in [(k, z) for k, z in self._zygotes.items() if not z.alive()]:
            del self._zygotes[key]
            zygote.reap()
            if not zygote.forked_any and zygote.proc.returncode != -signal.SIGKILL:
                self._failed.add(key)       # it could not import: do not start it again and again
        for zygote in [z for z in self._retired if not z.alive()]:
            self._retired.remove(zygote)
            zygote.reap()
        for spare in [s for s in self._spares if not s.alive()]:     # killed by cancel, or its zygote died
            self._spares.remove(spare)
            spare.discard()

    def _fork(self, zygote: Zygote, key: Key) -> Spare:
        folder = Path(tempfile.mkdtemp(prefix="tuner-spare-", dir=self.root)).resolve()
        stderr = open(folder / "stderr.txt", "w+")
        return Spare(zygote.fork(folder), folder, stderr, key)


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
