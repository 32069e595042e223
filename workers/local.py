"""Local executor: each trial in its own spawned process, up to `workers` at once.

Threads only wait on the trial processes (`run_isolated`). Each trial process leads its own
process group and works in a folder under this executor's scratch folder. The waiting threads
cannot be interrupted, but their processes can, and then each thread returns at once: `cancel`
and `close` kill the group of each cold trial process in flight there
(`isolation.kill_jobs_under`) and every zygote with the spares and trials it forked
(`SparePool.kill_zygotes`), each known by its handle and killed before it is reaped, so no pid
is mistaken for a reused one. Spare trial processes (`workers/spares.py`), one per worker,
forked from a zygote, wait in folders there too; the trials share one compile cache folder there
(`workers/caches.py`).
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import tempfile

from tuner.trial import (ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement, ProcessRequest, ProcessTiming,
                         TrialRequest)
from tuner.workers.caches import search_cache_env, user_cache_folder
from tuner.workers.isolation import confirm_isolated, kill_jobs_under, run_isolated, time_isolated
from tuner.workers.spares import TIMING_ENVS, SparePool

KILL_POLL_S = 0.05     # while cancelling: how often to look again for a process just started


class LocalExecutor:
    """Runs trials in processes on this machine; `scratch` is where their folders go
    (default: the system's temporary folder). `warm` (default) keeps one spare trial process per
    worker, forked ahead from a zygote that has imported torch and Inductor; False starts every trial cold."""

    def __init__(self, *, workers: int = 1, scratch: str | None = None, warm: bool = True):
        self.capacity = workers
        self._root = tempfile.mkdtemp(prefix="tuner-local-", dir=scratch)
        self._env = search_cache_env(None if user_cache_folder() else os.path.join(self._root, "cache"))
        self._spares = SparePool(os.path.join(self._root, "spares"), size=workers) if warm else None
        if self._spares is not None:
            self._spares.fill(self._env)
        # The process stage takes turns between a few runtime knob settings, each its environment:
        # a pool of its own keeps a zygote for each (started when first asked for).
        self._process_spares = SparePool(os.path.join(self._root, "timing-spares"), envs=TIMING_ENVS) if warm else None
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

    def run_process(self, request: ProcessRequest) -> ProcessTiming:
        """A timing process of the process stage, here, started with its runtime knobs."""
        return time_isolated(request, scratch=self._root, env=self._env, spares=self._process_spares)

    def platforms(self) -> None:
        """None: every trial runs on this machine, whatever its platform key."""
        return None

    def cancel(self) -> None:
        """Kill the process group of every trial in flight (and the zygote with its spares)
        and forget those trials. Returns once each waiting thread has seen its process die."""
        futures = list(self._futures)
        self._futures.clear()
        for future in futures:
            future.cancel()                     # a queued trial never starts
        self._kill_all()                        # the zygote too: the next trials start a new one
        while not all(future.done() for future in futures):
            self._kill_all()                    # again and again: a thread may be starting one
            cf.wait(futures, timeout=KILL_POLL_S)

    def close(self) -> None:
        """Cancel what is in flight, kill any confirmation still running (its caller was
        interrupted) and the spares, stop the threads and remove the scratch folder (the
        compile cache with it)."""
        self.cancel()
        for pool in (self._spares, self._process_spares):
            if pool is not None:
                pool.close()
        kill_jobs_under(self._root)
        self._pool.shutdown(wait=True)
        shutil.rmtree(self._root, ignore_errors=True)

    def _kill_all(self) -> None:
        kill_jobs_under(self._root)
        for pool in (self._spares, self._process_spares):
            if pool is not None:
                pool.kill_zygotes()

