"""Workers: where trials run. The `Executor` seam and its implementations.

`get_executor("local" | "ray", ...)` builds one; Ray is imported only when asked for.
`LocalExecutor` runs trials as processes on this machine, `RayExecutor` as Ray tasks,
`ReplayExecutor` answers from recorded measurements (for what cannot run here).
"""
from tuner.workers.executor import EXECUTORS, Executor, get_executor

__all__ = ["EXECUTORS", "Executor", "get_executor"]
