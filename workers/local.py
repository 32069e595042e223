"""Local executor: each trial in its own spawned process, up to `workers` at once."""
from __future__ import annotations

import concurrent.futures as cf

from tuner.trial import Measurement, TrialRequest
from tuner.workers.isolation import run_isolated, run_job


class LocalExecutor:
    """Threads only wait on child processes; all the work happens in the children."""

    def __init__(self, *, workers: int = 1, scratch: str | None = None):
        self.capacity = workers
        self._scratch = scratch
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tuner-trial")
        self._futures: dict[cf.Future, TrialRequest] = {}

    def submit(self, request: TrialRequest) -> None:
        future = self._pool.submit(run_isolated, request, scratch=self._scratch)
        self._futures[future] = request

    def next_result(self) -> tuple[TrialRequest, Measurement]:
        if not self._futures:
            raise LookupError("no trial is pending")
        done = next(cf.as_completed(self._futures))
        return self._futures.pop(done), done.result()

    def pending(self) -> int:
        return len(self._futures)

    def run_confirmation(self, request) -> tuple[dict | None, str]:
        """Confirmation runs here, in its own fresh process, like a trial."""
        return run_job("confirm", request.to_json(), timeout_s=request.timeout_s, scratch=self._scratch)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
