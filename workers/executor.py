"""The Executor seam: where trials run. Implementations: local (spawned processes), ray."""
from __future__ import annotations

from typing import Protocol

from typing import Any

from tuner.errors import UsageError
from tuner.trial import Measurement, TrialRequest


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

    def run_confirmation(self, request: Any) -> tuple[dict | None, str]:
        """Run a `tuner.confirm.ConfirmRequest` in a fresh process on a node of its platform.

        Returns `workers.isolation.run_job`'s answer: (result JSON, "") or (None, why not).
        """
        ...

    def close(self) -> None: ...


EXECUTORS = ("local", "ray")


def get_executor(name: str, *, workers: int = 1, address: str | None = None, platform_key: str | None = None,
                 device: str = "cpu") -> Executor:
    """Build the named executor. Ray is imported only when asked for.

    `platform_key` and `device` tell a local Ray cluster which platform it advertises and
    whether each trial holds a whole GPU; the local executor needs neither.
    """
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    if name == "local":
        from tuner.workers.local import LocalExecutor
        return LocalExecutor(workers=workers)
    if name == "ray":
        from tuner.workers.ray_pool import RayExecutor
        return RayExecutor(workers=workers, address=address, platform_key=platform_key, device=device)
    raise UsageError(f"unknown executor {name!r}; choose one of: {', '.join(EXECUTORS)}")
