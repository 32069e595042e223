"""Section 2 of bench/gpu_check.py: the trial's clock against `triton.testing.do_bench`, the
calls per sample, and the noise floor, on a GPU-bound model (bench/gpu/gpu_models.py's bf16 MLP,
4096 wide, batch 4096: two GEMMs of about 0.55 TFLOP each per call).

  - a defaults-against-defaults trial (`LocalExecutor`, `TrialRequest` with no knobs): the
    candidate is the default compile, so its paired speedup and interval are the noise floor a
    search's figures stand on;
  - the same model compiled here with the same (default) config: `do_bench` (CUDA events per
    call, L2 flushed before each, median) against the trial's figure: they should agree within
    AGREE (the trial times back-to-back calls, so launch overhead is in, and a GPU-bound model
    has little of it);
  - that runner timed by `CudaClock` (the trial's clock) at N and at 2N calls per sample, N as a
    trial calibrates it: a sample's fixed cost spread over different lengths would show here.
In --smoke (CPU) the wall clock stands in for do_bench and CudaClock, and nothing is compared.
"""
from __future__ import annotations

import time
from typing import Any

AGREE = 0.05


def section_clock(check: Any) -> list[str]:
    spec, trial = _trial(check)
    floor = f"defaults vs defaults {trial.speedup:.3f}x [{trial.speedup_low:.3f}, {trial.speedup_high:.3f}]"
    print(f"  trial: {trial.latency_ms:.4f} ms (baseline {trial.baseline_ms:.4f} ms, {trial.reps} samples); {floor}")
    do_bench_ms, at_n, at_2n, calls = _here(check, spec)
    ratio, doubled = trial.latency_ms / do_bench_ms, at_2n / at_n
    print(f"  do_bench {do_bench_ms:.4f} ms; trial / do_bench = {ratio:.3f}; the trial's clock at {calls} calls "
          f"per sample {at_n:.4f} ms, at {2 * calls} {at_2n:.4f} ms (2N / N = {doubled:.3f})")
    figures = [f"trial {trial.latency_ms:.4f} ms, do_bench {do_bench_ms:.4f} ms: ratio {ratio:.3f}",
               f"{calls} vs {2 * calls} calls per sample: {at_n:.4f} / {at_2n:.4f} ms ({doubled:.3f})",
               f"noise floor: {floor}"]
    if check.smoke:
        return figures + ["(CPU: wall clock for both; nothing compared)"]
    problems = []
    if abs(ratio - 1) > AGREE:
        problems.append(f"the trial's {trial.latency_ms:.4f} ms and do_bench's {do_bench_ms:.4f} ms differ by "
                        f"{abs(ratio - 1):.1%}")
    if abs(doubled - 1) > AGREE:
        problems.append(f"{calls} and {2 * calls} calls per sample differ by {abs(doubled - 1):.1%}")
    if problems:
        raise AssertionError("; ".join(problems) + " (figures: " + "; ".join(figures) + ")")
    return figures


def _trial(check: Any) -> tuple[Any, Any]:
    """The defaults-against-defaults trial in a trial process of its own."""
    from tuner.trial import MeasureSpec, TrialRequest
    from tuner.workers import get_executor

    spec = MeasureSpec(model_path=str(check.model("mlp")), repeat=20, timeout_s=max(20.0, check.left() - 20))
    executor = get_executor("local", workers=1)
    start = time.monotonic()
    try:
        executor.submit(TrialRequest(spec=spec, params=(), number=0))
        _, trial = executor.next_result()
    finally:
        executor.close()
    if not trial.ok:
        raise RuntimeError(f"the trial process ended {trial.status.value}: {(trial.error or '').splitlines()[:1]}")
    print(f"  trial process: {time.monotonic() - start:.1f} s in all, compile {trial.compile_s:.1f} s")
    return spec, trial


def _here(check: Any, spec: Any) -> tuple[float, float, float, int]:
    """(do_bench ms, the trial's clock at N and at 2N calls per sample, N) of the default compile here."""
    import torch

    from tuner.measure import Rejected, prepare
    from tuner.trial import calibrate, median_and_iqr, time_samples
    from tuner.trial.timing import CudaClock, min_sample_s

    runner = prepare(spec, ())
    if isinstance(runner, Rejected):
        raise RuntimeError(f"compiling here failed: {runner.headline}")
    with torch.no_grad():
        do_bench_ms = check.bench_ms(runner.call)
        calls = calibrate(runner.call, warmup=spec.warmup, sync=runner.sync, min_sample_s=min_sample_s(runner.device))
        if runner.device.startswith("cuda"):
            clock = CudaClock(runner.device)
            sample = lambda n: clock.samples(runner.call, calls=n, samples=15)  # noqa: E731
        else:
            sample = lambda n: time_samples(runner.call, calls=n, samples=15, sync=runner.sync)  # noqa: E731
        at_n, _ = median_and_iqr(sample(calls))
        at_2n, _ = median_and_iqr(sample(2 * calls))
    return do_bench_ms, at_n, at_2n, calls
