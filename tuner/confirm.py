"""Confirmation: re-measure the finalists against the default compile, interleaved and paired.

The trial process (`run_confirmation`) compiles every variant, then runs rounds in
which each variant is timed once, in shuffled order. The driver (`speedup`) takes
the per-round ratio baseline/variant, so slow drifts of a noisy machine cancel,
and reports the median ratio with a distribution-free interval.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from tuner.trial import Status

EAGER = "eager"
DEFAULT = "default"


@dataclass(frozen=True)
class ConfirmRequest:
    model_path: str
    variants: tuple[tuple[str, tuple[tuple[str, Any], ...] | None], ...]   # (label, params); None = eager
    rounds: int = 15
    samples_per_round: int = 3
    seed: int = 0
    threads: int | None = None
    timeout_s: float = 900.0
    platform_key: str | None = None      # Ray runs the confirmation on a node of this platform

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "variants": [[label, None if p is None else [list(kv) for kv in p]]
                                             for label, p in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmRequest":
        fields = dict(data)
        fields["variants"] = tuple((label, None if p is None else tuple((k, v) for k, v in p))
                                   for label, p in fields["variants"])
        return cls(**fields)


@dataclass(frozen=True)
class VariantResult:
    label: str
    status: Status
    compile_s: float | None = None
    round_ms: tuple[float, ...] = ()
    error: str | None = None

    @property
    def latency_ms(self) -> float | None:
        return statistics.median(self.round_ms) if self.round_ms else None


@dataclass(frozen=True)
class ConfirmResult:
    variants: tuple[VariantResult, ...] = field(default=())
    error: str | None = None

    def get(self, label: str) -> VariantResult | None:
        return next((v for v in self.variants if v.label == label), None)

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "variants": [{**asdict(v), "status": v.status.value, "round_ms": list(v.round_ms)}
                                                  for v in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmResult":
        return cls(error=data.get("error"), variants=tuple(
            VariantResult(label=v["label"], status=Status(v["status"]), compile_s=v["compile_s"],
                          round_ms=tuple(v["round_ms"]), error=v["error"]) for v in data["variants"]))


@dataclass(frozen=True)
class Speedup:
    """Median of per-round baseline/variant ratios and its interval (about 95%)."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def clears_noise(self) -> bool:
        return self.low > 1.0


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic interval for the median (binomial, no distribution assumed)."""
    xs, n = sorted(values), len(values)
    if n < 6:
        return xs[0], xs[-1]
    cdf, k = 0.0, 0
    for k in range(n + 1):
        cdf += math.comb(n, k) / 2**n
        if cdf > (1 - confidence) / 2:
            break
    lo = max(0, k - 1)
    return xs[lo], xs[n - 1 - lo]


def speedup(baseline: VariantResult, variant: VariantResult) -> Speedup | None:
    """Paired speedup of `variant` over `baseline`; None if either has no rounds."""
    pairs = [b / v for b, v in zip(baseline.round_ms, variant.round_ms) if v > 0]
    if not pairs:
        return None
    low, high = median_interval(pairs)
    return Speedup(median=statistics.median(pairs), low=low, high=high, rounds=len(pairs))


def run_confirmation(request: ConfirmRequest) -> ConfirmResult:
    """Trial-process side: compile each variant in a fresh model copy, then interleave rounds.

    A variant that fails to compile, or whose output differs from eager, is reported
    with its status and takes no part in the rounds.
    """
    import torch

    from tuner.measure import calibrate, time_samples
    from tuner.workers.lock import measure_lock

    if request.threads:
        torch.set_num_threads(request.threads)
    runners, results = _compile_variants(request)
    ready = [label for label in runners if label not in results]
    rng = random.Random(request.seed)
    rounds: dict[str, list[float]] = {label: [] for label in ready}
    with torch.no_grad(), measure_lock():
        calls = {label: calibrate(runners[label][0], warmup=3, sync=runners[label][1]) for label in ready}
        for _ in range(request.rounds):
            for label in rng.sample(ready, len(ready)):
                fn, sync, _ = runners[label]
                samples = time_samples(fn, calls=calls[label], samples=request.samples_per_round, sync=sync)
                rounds[label].append(statistics.median(samples))
    for label in ready:
        results[label] = VariantResult(label, Status.OK, compile_s=runners[label][2], round_ms=tuple(rounds[label]))
    return ConfirmResult(variants=tuple(results[label] for label, _ in request.variants))


def _compile_variants(request: ConfirmRequest) -> tuple[dict[str, tuple], dict[str, VariantResult]]:
    """Compile and verify each variant. Returns runners {label: (fn, sync, compile_s)} and failures."""
    import torch

    from tuner.compiler import compile_config, compile_model
    from tuner.measure import classify_compile_failure, compare_outputs, device_sync, error_headline
    from tuner.modelfile import flatten_outputs, load_model_file
    from tuner.workers.lock import compile_lock

    runners: dict[str, tuple] = {}
    failures: dict[str, VariantResult] = {}
    for label, params in request.variants:
        # A fresh load per variant: new module and class objects, so Dynamo caches never mix variants.
        loaded = load_model_file(request.model_path, seed=request.seed)
        with torch.no_grad():
            reference = [t.clone() for t in flatten_outputs(loaded.call())]
            model = loaded.model if params is None else compile_model(loaded.model, compile_config(dict(params)))
            start = time.perf_counter()
            try:
                with compile_lock():
                    out = flatten_outputs(loaded.call(model))
            except Exception as exc:  # a failing finalist is a value, not a dead confirmation
                failures[label] = VariantResult(label, classify_compile_failure(exc), error=error_headline(exc))
                continue
            compile_s = time.perf_counter() - start
        mismatch = compare_outputs(reference, out)
        if mismatch:
            failures[label] = VariantResult(label, Status.WRONG_RESULT, error=mismatch)
            continue
        runners[label] = (lambda ld=loaded, m=model: ld.call(m), device_sync(loaded.device),
                          None if params is None else compile_s)
    return runners, failures
