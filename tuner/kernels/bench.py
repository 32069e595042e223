"""Timing one config of a `tuner.autotune` kernel: the timers, and the measurement boundary.

A timer is handed a `launch` callable (one launch of the kernel under one config, with the
argument hooks around it) and the config, and returns how long a launch takes. On a GPU
the default is `triton.testing.do_bench` (CUDA events). Under `TRITON_INTERPRET=1` there is
no meaningful timer: the default there is wall-clock time of the interpreter, which ranks
nothing real, so inject one (`tuner.autotune(..., timer=...)`) when the choice matters.

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


class DoBenchTimer:
    """Triton's own benchmark (`triton.testing.do_bench`): CUDA events, caches flushed."""

    def __call__(self, launch: Callable[[], None], config: Mapping[str, Scalar]) -> Timing:
        from triton.testing import do_bench

        median, low, high = do_bench(launch, quantiles=[0.5, 0.2, 0.8])
        return Timing(median_ms=float(median), spread_ms=float(high - low))


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


@dataclass(frozen=True)
class ArgHooks:
    """Arguments a benchmark must not leave changed: `reset_to_zero` ones are zeroed before
    every launch (and once after the search); `restore_value` ones get their values back
    after every launch."""

    reset_to_zero: tuple[str, ...] = ()
    restore_value: tuple[str, ...] = ()

    def zero(self, named: Mapping[str, Any]) -> None:
        for name in self.reset_to_zero:
            if named.get(name) is not None:
                named[name].zero_()


def benchmark(run_config: Callable[[Config], None], config: Config, *, timer: Timer,
              named: Mapping[str, Any], hooks: ArgHooks) -> Measurement:
    """Time one config; never raises for a config that fails (status COMPILE_ERROR or
    RUNTIME_ERROR, with the error). Arguments in `hooks` are zeroed before each launch and
    restored after each, also when the launch fails."""
    saved = {name: named[name].clone() for name in hooks.restore_value if named.get(name) is not None}

    def launch() -> None:
        hooks.zero(named)
        try:
            run_config(config)
        finally:
            for name, copy in saved.items():
                named[name].copy_(copy)

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
