"""Stand-in trial bodies for the Ray executor: Ray's own faults and its framework cost, with no
trial process. Tests and benches pass `stand_in` as `RayExecutor(measure=...)`.

A stand-in request says what to do in its params (`stand_in_request`): exit (the Ray worker
itself exits: os._exit), hang (the Ray worker hangs; only the driver's deadline ends it),
sleep_s (sleep, then an OK Measurement) or nothing (an OK Measurement at once). Ray workers
cannot import this module (tests/ is not on their path), so it travels by value.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

from tuner.trial import MeasureSpec, Measurement, Status, TrialRequest

EXIT, HANG = "exit", "hang"


def stand_in(request: TrialRequest) -> Measurement:
    """What a Ray task runs for a stand-in request, in the Ray worker process itself."""
    what = dict(request.params)
    if what.get("stand_in") == EXIT:
        os._exit(17)
    if what.get("stand_in") == HANG:
        time.sleep(10**6)
    time.sleep(float(what.get("sleep_s", 0.0)))
    return Measurement(status=Status.OK, latency_ms=0.0, spread_ms=0.0, compile_s=0.0, reps=0)


def stand_in_request(number: int, *, stand_in: str | None = None, sleep_s: float = 0.0,
                     platform: str | None = None, timeout_s: float = 60.0) -> TrialRequest:
    params: tuple[tuple[str, Any], ...] = ((("stand_in", stand_in),) if stand_in else ()) + (
        (("sleep_s", sleep_s),) if sleep_s else ())
    return TrialRequest(spec=MeasureSpec("stand-in.py", timeout_s=timeout_s, platform_key=platform),
                        params=params, number=number)


def travel_by_value() -> None:
    """Have Ray pickle this module's functions by value, so that workers need not import it."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def stand_in_executor(**options: Any):
    """A RayExecutor whose tasks run `stand_in`."""
    from tuner.workers.ray_pool import RayExecutor

    travel_by_value()
    return RayExecutor(measure=stand_in, **options)


def where_tuner_is() -> dict[str, Any]:
    """Run as a Ray task: which `tuner.workers` a Ray worker imports, and its sys.path."""
    import tuner.workers

    return {"tuner.workers": tuner.workers.__file__, "sys_path": list(sys.path)}
