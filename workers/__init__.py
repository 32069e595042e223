"""Workers: where trials run. The `Executor` seam and its implementations.

`get_executor("local" | "ray", ...)` builds one; Ray is imported only when asked for.
`LocalExecutor` runs trials as processes on this machine, `RayExecutor` as Ray tasks,
`ReplayExecutor` answers from recorded measurements (for what cannot run here).
`describe_platform` is what a node reports of itself (`python -m tuner.workers.placement`).
"""
from typing import Any

from tuner.workers.executor import EXECUTORS, Executor, get_executor

__all__ = ["EXECUTORS", "Executor", "describe_platform", "get_executor"]


def __getattr__(name: str) -> Any:
    # placement runs as `python -m tuner.workers.placement`: importing it here, before it runs as
    # __main__, would make Python warn that it was already imported.
    if name == "describe_platform":
        from tuner.workers.placement import describe_platform

        return describe_platform
    raise AttributeError(f"module 'tuner.workers' has no attribute {name!r}")
