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
import), or, STUCK_S after it started, has forked no spare a job waited for past its deadline
(stuck), turns spares off for that environment: its jobs start cold, and a `SparesOff` warning
says so once, with the end of the zygote's stderr.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

from tuner.workers.scratch import process_folder
from tuner.workers.zygote import Forked, Zygote

Key = tuple[tuple[str, str], ...]
# A zygote that has forked no spare this long after it started, while a job waited for one past its
# deadline, is stuck: its imports take 4-7 s on 2 cores here, under a minute on a loaded machine.
STUCK_S = 120.0
# The process stage takes turns between a few runtime knob settings, each an environment of its own
# (a knob's values and the settings before them): a pool for it keeps a zygote for each.
TIMING_ENVS = 4


class SparesOff(UserWarning):
    """Spare trial processes are off for an environment: its zygote could not import, or was stuck."""


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
    """At most `size` spares for each of at most `envs` environments, forked in folders under `root`
    (made if missing).

    Thread-safe: the local executor's threads take from one pool. `kill_zygotes` and `close` kill
    every zygote, and every spare and trial forked from it, each with its process group; a zygote
    also dies with the thread that started it (Linux's parent-death signal), and its children
    with it (their groups with them: `lifeline.guard_group`).
    """

    def __init__(self, root: str, *, size: int = 1, envs: int = 1):
        self.root, self.size, self.envs = root, size, envs
        self._spares: list[Spare] = []
        self._zygotes: dict[Key, Zygote] = {}
        self._retired: list[Zygote] = []
        self._failed: set[Key] = set()      # environments whose zygote died before forking anything
        self._lock = threading.Lock()
        self._closed = False

    def fill(self, env: Mapping[str, str] | None) -> None:
        """Fork spares for `env` until `size` of its environment wait. Beyond `envs` environments, the
        zygote and spares of the one used least recently go (a retired zygote forks nothing more and
        exits once its running trials end): a search's trials share one environment; the process
        stage takes turns between a few (`tuner.search.process_stage`)."""
        key = env_key(env)
        with self._lock:
            self._drop_dead()
            if self._closed or key in self._failed:
                return
            zygote = self._zygotes.pop(key, None)
            for other in list(self._zygotes)[:max(0, len(self._zygotes) - self.envs + 1)]:
                self._retired.append(self._zygotes.pop(other))
                self._retired[-1].retire()
                for spare in [s for s in self._spares if s.key == other]:
                    self._spares.remove(spare)
                    spare.discard()
            if zygote is None:
                os.makedirs(self.root, exist_ok=True)
                zygote = Zygote(self.root, env)
            self._zygotes[key] = zygote         # last: the most recently used
            while sum(s.key == key for s in self._spares) < self.size:
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

    def never_forked(self, spare: Spare) -> None:
        """`spare` had a job and its zygote did not fork it before the job's deadline. A zygote
        still importing (started under STUCK_S ago) is left to finish; an older one is stuck:
        kill it and start that environment's jobs cold from now on, saying so."""
        zygote = spare.proc.zygote
        age = time.monotonic() - zygote.started
        with self._lock:
            owned = age >= STUCK_S and self._zygotes.get(spare.key) is zygote
            if owned:
                del self._zygotes[spare.key]
        if not owned:
            return
        zygote.kill()
        with self._lock:
            self._turn_off(spare.key, f"their zygote forked no spare in {age:.0f} s, a trial's deadline passing as it "
                                      f"waited: it was stuck, or its imports far too slow, and was killed",
                           zygote.failure)

    def kill_zygotes(self) -> None:
        """Kill every zygote, with the spares and trials forked from it; the next `fill` or `take` starts anew."""
        with self._lock:
            spares, self._spares = self._spares, []
            zygotes = [*self._zygotes.values(), *self._retired]
            self._zygotes, self._retired = {}, []
        for zygote in zygotes:
            zygote.kill()
        for spare in spares:
            spare.discard()

    def close(self) -> None:
        """Kill every zygote, with the spares and trials forked from it; none starts after this."""
        with self._lock:
            self._closed = True
        self.kill_zygotes()

    def _drop_dead(self) -> None:
        # Zygotes first: reaping one ends the handles of the spares it forked.
        for key, zygote in [(k, z) for k, z in self._zygotes.items() if not z.alive()]:
            del self._zygotes[key]
            zygote.reap()
            if not zygote.forked_any and zygote.proc.returncode != -signal.SIGKILL:     # it could not import
                self._turn_off(key, f"their zygote exited with status {zygote.proc.returncode} before forking any",
                               zygote.failure)
        for zygote in [z for z in self._retired if not z.alive()]:
            self._retired.remove(zygote)
            zygote.reap()
        for spare in [s for s in self._spares if not s.alive()]:     # killed by cancel, or its zygote died
            self._spares.remove(spare)
            spare.discard()

    def _turn_off(self, key: Key, why: str, stderr: str | None) -> None:
        """Start no zygote for `key` again (its jobs start cold), and say why, once (the caller holds the lock)."""
        self._failed.add(key)
        said = (stderr or "").strip() or "(nothing)"
        warnings.warn(f"spare trial processes are off: {why}; each trial process now starts cold and imports torch "
                      f"itself (slower, measured the same). The zygote (python -m tuner.workers.trial_process "
                      f"--zygote) runs in the trials' environment; its stderr ended with:\n{said}\nFix what it "
                      f"says, or pass --cold-processes to start trials cold from the outset.", SparesOff, stacklevel=2)

    def _fork(self, zygote: Zygote, key: Key) -> Spare:
        folder = Path(tempfile.mkdtemp(prefix="tuner-spare-", dir=self.root)).resolve()
        stderr = open(folder / "stderr.txt", "w+")
        return Spare(zygote.fork(folder), folder, stderr, key)


_PROCESS_POOL: SparePool | None = None


def process_spares() -> SparePool:
    """This process's own pool of one spare (made on first use): a Ray worker process keeps its spare
    between the tasks Ray runs in it. Its folders are in this process's own folder
    (`workers/scratch.py`). Closed, with its folder removed, when the process exits; if it is
    killed instead, its zygote and spare die with it (the parent-death signal), and the next
    process to make its own folder on this machine removes this one."""
    global _PROCESS_POOL
    if _PROCESS_POOL is None:
        import atexit

        pool = SparePool(os.path.join(process_folder(), "spares"), size=1)
        atexit.register(pool.close)     # before the folder's removal, registered earlier
        _PROCESS_POOL = pool
    return _PROCESS_POOL


_TIMING_POOL: SparePool | None = None


def timing_spares() -> SparePool:
    """This process's own pool for the process stage's timing processes (made on first use): a zygote for
    each of up to TIMING_ENVS environments, in this process's own folder, closed as `process_spares`."""
    global _TIMING_POOL
    if _TIMING_POOL is None:
        import atexit

        pool = SparePool(os.path.join(process_folder(), "timing-spares"), envs=TIMING_ENVS)
        atexit.register(pool.close)
        _TIMING_POOL = pool
    return _TIMING_POOL
