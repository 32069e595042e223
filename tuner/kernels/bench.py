"""Timing one config of a `tuner.autotune` kernel: the timers, and the measurement boundary.

A timer is handed a `launch` callable (one launch of the kernel under one config, with
Triton's hooks around it: the config's `pre_hook`, the kernel's `pre_hook` and `post_hook`)
and the config, and returns how long a launch takes. A Triton `do_bench` (`do_bench=`, or
`warmup=`/`rep=`) is a timer through `DoBenchTimer`; on a GPU the default is the driver's
benchmarker, as in Triton. Under `TRITON_INTERPRET=1` there is no meaningful timer: the
default there is wall-clock time of the interpreter, which ranks nothing real, so inject one
(`tuner.autotune(..., timer=...)` or `do_bench=`) when the choice matters.

`benchmark` is the one place that turns a failing config (a compile error, out of
resources, a crash in the launch) into a `Measurement` with a status instead of an exception.
"""
from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Union

from tuner.kernels.space import Config, Scalar
from tuner.trial import Measurement, Status

log = logging.getLogger("tuner.kernels")


@dataclass(frozen=True)
class Timing:
    """How long one launch takes: the median, and the spread (20th to 80th percentile)."""

    median_ms: float
    spread_ms: float = 0.0


class Timer(Protocol):
    """Times `launch` (call it at least once) for `config`; returns a Timing, or the median
    in milliseconds as a float."""

    def __call__(self, launch: Callable[[], None], config: Mapping[str, Scalar]) -> Union[Timing, float]: ...


@dataclass(frozen=True)
class DoBenchTimer:
    """A Triton benchmark function, `do_bench(kernel_call, quantiles=...)`, as a timer
    (default: `triton.testing.do_bench`: CUDA events, caches flushed). A do_bench that
    returns one number gives a spread of 0."""

    do_bench: Callable[..., Any] | None = None

    def __call__(self, launch: Callable[[], None], config: Mapping[str, Scalar]) -> Timing:
        if self.do_bench is None:
            from triton.testing import do_bench
        else:
            do_bench = self.do_bench
        got = do_bench(launch, quantiles=(0.5, 0.2, 0.8))
        if isinstance(got, (int, float)):
            return Timing(median_ms=float(got))
        median, low, high = (list(got) + [got[0], got[0]])[:3]
        return Timing(median_ms=float(median), spread_ms=abs(float(high) - float(low)))


@dataclass(frozen=True)
class WallClockTimer:
    """Wall-clock time of `reps` launches (after one warm-up launch): the interpreter's
    default. Under `TRITON_INTERPRET=1` it times Python, not the kernel."""

    reps: int = 3

    def __call__(self, launch: Callable[[], None], config: Mapping[str, Scalar]) -> Timing:
        launch()
        samples = []
        for _ in range(self.reps):
            start = time.perf_counter()
            launch()
            samples.append(1000.0 * (time.perf_counter() - start))
        ordered = sorted(samples)
        return Timing(median_ms=statistics.median(samples), spread_ms=ordered[-1] - ordered[0])


def benchmark(launch: Callable[[], None], config: Config, *, timer: Timer) -> Measurement:
    """Time one config (`launch` runs it once, hooks included); never raises for a config
    that fails (status COMPILE_ERROR or RUNTIME_ERROR, with the error)."""
    try:
        timing = timer(launch, dict(config))
    except Exception as exc:  # noqa: BLE001 - the measurement boundary: a failing config is a value
        log.debug("config %s failed", config, exc_info=True)
        return Measurement(status=_status_of(exc), error=f"{type(exc).__name__}: {exc}"[:2000])
    if not isinstance(timing, Timing):
        timing = Timing(median_ms=float(timing))
    if not (math.isfinite(timing.median_ms) and math.isfinite(timing.spread_ms)):
        return Measurement(status=Status.RUNTIME_ERROR,
                           error=f"the timer returned {timing.median_ms} ms (spread {timing.spread_ms})")
    return Measurement(status=Status.OK, latency_ms=timing.median_ms, spread_ms=timing.spread_ms)


def _status_of(exc: Exception) -> Status:
    """Compile-time failures (Triton's compiler errors, out of resources, ptxas) or anything else."""
    compile_errors = ("CompilationError", "CompileTimeAssertionFailure", "OutOfResources",
                      "PTXASError")
    names = {cls.__name__ for cls in type(exc).__mro__}
    return Status.COMPILE_ERROR if names & set(compile_errors) else Status.RUNTIME_ERROR
