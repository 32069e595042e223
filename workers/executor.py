"""The Executor seam: where trials run. Implementations: local (spawned processes), ray."""
from __future__ import annotations

from typing import Protocol

from tuner.errors import UsageError
from tuner.trial import ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement, ProcessRequest, ProcessTiming, TrialRequest


class Executor(Protocol):
    """Runs trials and hands back results as they finish.

    Contract: every submitted request comes back from `next_result` exactly once,
    with a Measurement (failures included). Executors never touch the database.
    """

    capacity: int          # how many trials may be in flight at once

    def submit(self, request: TrialRequest) -> None: ...

    def next_result(self) -> tuple[TrialRequest, Measurement]:
        """Block until one submitted trial finishes; raise LookupError if none is pending."""
        ...

    def pending(self) -> int: ...

    def run_confirmation(self, request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
        """Run a confirmation in a fresh process on a node of its platform (blocking).

        Never raises for a failed run: no result within `request.timeout_s` is a
        `ConfirmFailed` with TIMEOUT, a process or task that died one with CRASHED.
        """
        ...

    def run_process(self, request: ProcessRequest) -> ProcessTiming:
        """Time one config in a fresh process started with `request.runtime` (runtime knobs: an
        allocator preloaded, OpenMP's environment), on a node of its platform (blocking): the
        process stage's unit (`tuner.search.process_stage`). Never raises for a failed process: a
        ProcessTiming with TIMEOUT or CRASHED, as a trial's."""
        ...

    def platforms(self) -> dict[str, int] | None:
        """Platform key -> alive nodes advertising it, where the executor places work by platform.

        None: this executor runs everything on this machine and places nothing by platform
        (local and replay), so it can tune only for the driver's own platform.
        """
        ...

    def cancel(self) -> None:
        """Stop every submitted trial that has not come back yet, killing its process now.

        None of them comes back from `next_result` and `pending()` is 0 afterwards; the
        executor stays usable. Called when the search is interrupted (Ctrl-C, SIGTERM).
        """
        ...

    def close(self) -> None:
        """Cancel what is in flight, then release everything the executor started; no trial
        or confirmation process of it outlives this call."""
        ...


EXECUTORS = ("local", "ray")


def get_executor(name: str, *, workers: int = 1, address: str | None = None, platform_key: str | None = None,
                 device: str = "cpu", warm: bool = True) -> Executor:
    """Build the named executor. Ray is imported only when asked for.

    `platform_key` and `device` tell a local Ray cluster which platform it advertises and
    whether each trial holds a whole GPU; the local executor needs neither. `warm` (default):
    trials go to spare processes that have imported already (`workers/spares.py`); False
    (`--cold-processes`): every trial process starts cold.
    """
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    if name == "local":
        from tuner.workers.local import LocalExecutor
        return LocalExecutor(workers=workers, warm=warm)
    if name == "ray":
        from tuner.workers.ray_pool import RayExecutor
        return RayExecutor(workers=workers, address=address, platform_key=platform_key, device=device, warm=warm)
    raise UsageError(f"unknown executor {name!r}; choose one of: {', '.join(EXECUTORS)}")
