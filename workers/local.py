"""Local executor: each trial in its own spawned process, up to `workers` at once.

Threads only wait on the trial processes (`run_isolated`). Each trial process leads its own
process group and works in a folder under this executor's scratch folder, which is how
`cancel` and `close` find the processes to kill: the waiting threads cannot be interrupted,
but their children can, and then each thread returns at once. Spare trial processes
(`workers/spares.py`), one per worker, forked from a zygote, wait in folders there too; the trials share one compile
cache folder there (`workers/caches.py`).
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import signal
import tempfile

from tuner.trial import ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement, TrialRequest
from tuner.workers.caches import search_cache_env
from tuner.workers.isolation import confirm_isolated, run_isolated
from tuner.workers.spares import SparePool

KILL_POLL_S = 0.05     # while cancelling: how often to look again for a process just started


class LocalExecutor:
    """Runs trials in processes on this machine; `scratch` is where their folders go
    (default: the system's temporary folder). `warm` (default) keeps one spare trial process per
    worker, forked ahead from a zygote that has imported torch and Inductor; False starts every trial cold."""

    def __init__(self, *, workers: int = 1, scratch: str | None = None, warm: bool = True):
        self.capacity = workers
        self._root = tempfile.mkdtemp(prefix="tuner-local-", dir=scratch)
        self._env = search_cache_env(os.path.join(self._root, "cache"))
        self._spares = SparePool(os.path.join(self._root, "spares"), size=workers) if warm else None
        if self._spares is not None:
            self._spares.fill(self._env)
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tuner-trial")
        self._futures: dict[cf.Future, TrialRequest] = {}

    def submit(self, request: TrialRequest) -> None:
        future = self._pool.submit(run_isolated, request, scratch=self._root, env=self._env, spares=self._spares)
        self._futures[future] = request

    def next_result(self) -> tuple[TrialRequest, Measurement]:
        if not self._futures:
            raise LookupError("no trial is pending")
        done = next(cf.as_completed(self._futures))
        return self._futures.pop(done), done.result()

    def pending(self) -> int:
        return len(self._futures)

    def run_confirmation(self, request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
        """Confirmation runs here, in its own fresh process, like a trial."""
        return confirm_isolated(request, scratch=self._root, env=self._env, spares=self._spares)

    def platforms(self) -> None:
        """None: every trial runs on this machine, whatever its platform key."""
        return None

    def cancel(self) -> None:
        """Kill the process group of every trial in flight (and of the zygote and its spares)
        and forget those trials.

        Returns once each waiting thread has seen its process die. Off Linux (no /proc to
        find the processes) it waits for them to end by themselves, within their deadlines.
        """
        futures = list(self._futures)
        self._futures.clear()
        for future in futures:
            future.cancel()                     # a queued trial never starts
        _kill_groups(self._root)                # the zygote too: the next trials start a new one
        while not all(future.done() for future in futures):
            _kill_groups(self._root)            # again and again: a thread may be starting one
            cf.wait(futures, timeout=KILL_POLL_S)

    def close(self) -> None:
        """Cancel what is in flight, kill any confirmation still running (its caller was
        interrupted) and the spares, stop the threads and remove the scratch folder (the
        compile cache with it)."""
        self.cancel()
        if self._spares is not None:
            self._spares.close()
        _kill_groups(self._root)
        self._pool.shutdown(wait=True)
        shutil.rmtree(self._root, ignore_errors=True)


def _kill_groups(root: str) -> None:
    """SIGKILL the process group of each process of ours that works under `root`: our children
    there (cold trial processes, zygotes) and theirs (the spares and trials a zygote forked, each
    leading its own group with its compile workers; the zygote's death alone would kill the trial
    but not its group)."""
    for pid in _processes_under(root):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):   # it ended meanwhile
            pass


def _processes_under(root: str) -> list[int]:
    """Pids of this process's children whose working folder is `root` or inside it, and of their
    children working there (Linux: read from /proc; elsewhere none), grandchildren first. A folder
    removed meanwhile reads "PATH (deleted)"."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    parents: dict[int, int] = {}
    for name in names:
        try:
            with open(f"/proc/{name}/stat") as stat:
                parent = int(stat.read().rpartition(")")[2].split()[1])   # the name may hold spaces
            cwd = os.readlink(f"/proc/{name}/cwd")
        except (OSError, IndexError, ValueError):       # gone, or a zombie without a folder
            continue
        if cwd == root or cwd.startswith(root + os.sep) or cwd.startswith(root + " "):
            parents[int(name)] = parent
    children = [pid for pid, parent in parents.items() if parent == os.getpid()]
    return [pid for pid, parent in parents.items() if parent in children] + children
