"""Measurement inside one trial process: compile, verify against eager, time.

`run_trial` is the measurement boundary: the one place that catches broadly and
turns any exception into a `Measurement` with a status. Everything it times runs on
the model's real inputs (never zeros), after warm-up, under the node's measure lock.
"""
from __future__ import annotations

import math
import os
import random
import resource
import socket
import statistics
import time
import traceback
from typing import Any, Callable

import torch

from tuner.trial import Measurement, Status, TrialRequest

# (rtol, atol) by dtype. Inductor reorders reductions and fuses, so fp32 gets more
# room than torch.testing's defaults; low precision gets its usual tolerance.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}
MIN_SAMPLE_S = 0.002   # one timed sample covers at least this long, so perf_counter's grain is noise-free


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def error_headline(exc: BaseException) -> str:
    """One line for a failed trial: the exception's type and the headline of its message.

    Inductor and Dynamo put the cause first and boilerplate last, so this is the first
    non-empty line (at most 300 characters), not the last.
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def compare_outputs(reference: list[torch.Tensor], got: list[torch.Tensor]) -> str | None:
    """None when `got` matches `reference` within its dtype's tolerance, else why not.

    NaN or Inf where the reference is finite is a mismatch.
    """
    if len(reference) != len(got):
        return f"output has {len(got)} tensors, eager has {len(reference)}"
    for i, (ref, out) in enumerate(zip(reference, got)):
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return f"output {i}: {tuple(out.shape)} {out.dtype}, eager {tuple(ref.shape)} {ref.dtype}"
        ref, out = ref.detach().cpu(), out.detach().cpu()
        if not ref.is_floating_point():
            if not torch.equal(ref, out):
                return f"output {i}: integer values differ from eager"
            continue
        bad = ~torch.isfinite(out) & torch.isfinite(ref)
        if bool(bad.any()):
            return f"output {i}: {int(bad.sum())} NaN/Inf values where eager is finite"
        rtol, atol = TOLERANCES.get(ref.dtype, (1e-4, 1e-4))
        if not torch.allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True):
            err = float((out.double() - ref.double()).abs().max())
            return f"output {i}: max abs error {err:.3g} exceeds {ref.dtype} tolerance (rtol={rtol}, atol={atol})"
    return None


def calibrate(fn: Callable[[], Any], *, warmup: int, sync: Callable[[], None]) -> int:
    """Run `warmup` calls; return how many calls one timed sample needs to last MIN_SAMPLE_S."""
    start = time.perf_counter()
    for _ in range(max(1, warmup)):
        fn()
    sync()
    per_call = (time.perf_counter() - start) / max(1, warmup)
    return max(1, math.ceil(MIN_SAMPLE_S / max(per_call, 1e-7)))


def time_samples(fn: Callable[[], Any], *, calls: int, samples: int, sync: Callable[[], None]) -> list[float]:
    """`samples` timings in ms per call, each over `calls` back-to-back calls."""
    out = []
    for _ in range(samples):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - start) * 1000.0 / calls)
    return out


def median_and_iqr(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 4:
        return statistics.median(samples), (max(samples) - min(samples))
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return statistics.median(samples), q3 - q1


def device_sync(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux reports KiB


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def classify_compile_failure(exc: BaseException) -> Status:
    """First-call failures inside Dynamo/Inductor are compile errors; the rest ran and failed."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"BackendCompilerFailed", "InductorError", "CppCompileError", "CUDACompileError"}:
        return Status.COMPILE_ERROR
    return Status.RUNTIME_ERROR


def run_trial(request: TrialRequest) -> Measurement:
    """Compile the request's candidate, verify it against eager, and time it.

    Never raises for a tuning failure: every exception becomes a Measurement.
    """
    worker = worker_name()
    try:
        return _measure(request, worker)
    except _Failed as failed:
        return Measurement.failed(failed.status, failed.message, worker)
    except Exception as exc:  # the measurement boundary: a bug in the trial is still a value
        return Measurement.failed(Status.RUNTIME_ERROR, f"{error_headline(exc)}\n{traceback.format_exc()}", worker)


class _Failed(Exception):
    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _measure(request: TrialRequest, worker: str) -> Measurement:
    from tuner.compiler import compile_config, compile_model
    from tuner.modelfile import flatten_outputs, load_model_file
    from tuner.workers.lock import compile_lock, measure_lock

    if request.threads:
        torch.set_num_threads(request.threads)
    loaded = load_model_file(request.model_path, seed=request.seed)
    with torch.no_grad():
        reference = [t.clone() for t in flatten_outputs(loaded.call())]
        config = compile_config(dict(request.params))
        compiled = compile_model(loaded.model, config)
        start = time.perf_counter()
        try:
            _inject_fault(request.fault)
            with compile_lock():
                first = loaded.call(compiled)
        except Exception as exc:
            raise _Failed(classify_compile_failure(exc), f"{error_headline(exc)}\n{traceback.format_exc()}")
        compile_s = time.perf_counter() - start
        got = flatten_outputs(first)
        if request.fault == "nan":
            got = [torch.full_like(t, float("nan")) if t.is_floating_point() else t for t in got]
        mismatch = compare_outputs(reference, got)
        if mismatch:
            raise _Failed(Status.WRONG_RESULT, mismatch)
        sync = device_sync(loaded.device)
        fn = lambda: loaded.call(compiled)  # noqa: E731
        with measure_lock():
            calls = calibrate(fn, warmup=request.warmup, sync=sync)
            samples = time_samples(fn, calls=calls, samples=request.repeat, sync=sync)
    median, spread = median_and_iqr(samples)
    return Measurement(status=Status.OK, latency_ms=median, spread_ms=spread, compile_s=compile_s,
                       peak_mem_mb=peak_memory_mb(loaded.device), reps=len(samples), worker=worker)


def _inject_fault(fault: str | None) -> None:
    """Test-only fault hook (TUNER_TEST_FAULTS): make this trial crash, hang or raise."""
    if fault == "abort":
        os.abort()
    if fault == "exit":
        os._exit(3)
    if fault == "hang":
        time.sleep(10_000)
    if fault == "raise":
        raise RuntimeError("injected fault (TUNER_TEST_FAULTS)")
