"""Confirmation: re-measure the finalists against the default compile, interleaved and paired.

The trial process (`run_confirmation`) gets every variant ready through
`tuner.measure.prepare`, as a trial does, then runs rounds in which each variant is
timed once, in shuffled order. The driver (`speedup`) takes the per-round ratio
baseline/variant, so slow drifts of a noisy machine cancel, and reports the median
ratio with a distribution-free interval.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from tuner.stats import Speedup, median_interval, paired_speedup
from tuner.trial import MeasureSpec, Status

__all__ = ["DEFAULT", "EAGER", "ConfirmFailed", "ConfirmRequest", "ConfirmResult", "Speedup", "VariantResult",
           "halves", "median_interval", "run_confirmation", "speedup"]

EAGER = "eager"
DEFAULT = "default"


@dataclass(frozen=True)
class ConfirmRequest:
    """The finalists to re-measure, with the search's MeasureSpec (its `timeout_s` covers the
    whole confirmation run)."""

    spec: MeasureSpec
    variants: tuple[tuple[str, tuple[tuple[str, Any], ...] | None], ...]   # (label, params); None = eager
    rounds: int = 20
    samples_per_round: int = 3

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s

    @property
    def platform_key(self) -> str | None:
        return self.spec.platform_key

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec.to_json(), "rounds": self.rounds, "samples_per_round": self.samples_per_round,
                "variants": [[label, None if p is None else [list(kv) for kv in p]] for label, p in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmRequest":
        variants = tuple((label, None if p is None else tuple((k, v) for k, v in p)) for label, p in data["variants"])
        return cls(spec=MeasureSpec.from_json(data["spec"]), variants=variants, rounds=data["rounds"],
                   samples_per_round=data["samples_per_round"])


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
    """What a confirmation run measured: one VariantResult per variant, in the request's order."""

    variants: tuple[VariantResult, ...] = field(default=())
    error: str | None = None
    threads: int | None = None        # torch's thread count in the confirmation process

    def get(self, label: str) -> VariantResult | None:
        return next((v for v in self.variants if v.label == label), None)

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "threads": self.threads,
                "variants": [{**asdict(v), "status": v.status.value, "round_ms": list(v.round_ms)}
                             for v in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmResult":
        return cls(error=data.get("error"), threads=data.get("threads"), variants=tuple(
            VariantResult(label=v["label"], status=Status(v["status"]), compile_s=v["compile_s"],
                          round_ms=tuple(v["round_ms"]), error=v["error"]) for v in data["variants"]))


@dataclass(frozen=True)
class ConfirmFailed:
    """No confirmation result at all: the run passed its deadline (TIMEOUT), its process or Ray
    task died (CRASHED), or the executor cannot confirm (RUNTIME_ERROR). `error` says why, headline first."""

    status: Status
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmFailed":
        return cls(status=Status(data["status"]), error=data["error"])


def speedup(baseline: VariantResult, variant: VariantResult) -> Speedup | None:
    """Paired speedup of `variant` over `baseline`; None if either has no rounds."""
    return paired_speedup(baseline.round_ms, variant.round_ms)


def halves(result: ConfirmResult) -> tuple[ConfirmResult, ConfirmResult]:
    """The result split by round parity: (even rounds, odd rounds). A choice made on one half
    and a claim reported from the other are independent: the claim's rounds played no part
    in the choice (no winner's curse), and both halves span the whole run in time."""
    def pick(parity: int) -> ConfirmResult:
        return replace(result, variants=tuple(replace(v, round_ms=v.round_ms[parity::2]) for v in result.variants))

    return pick(0), pick(1)


def run_confirmation(request: ConfirmRequest) -> ConfirmResult:
    """Trial-process side: get each variant ready in a fresh model copy, then interleave rounds.

    Each variant goes through `tuner.measure.prepare`, as a trial does. One that fails to
    compile, or whose output differs from eager, is reported with its status and takes no
    part in the rounds.
    """
    import torch

    from tuner.measure import Rejected, Runner, allow_variants, apply_threads, prepare
    from tuner.node_lock import measure_lock
    from tuner.timing import RoundPlan, interleaved_rounds

    threads = apply_threads(request.spec)
    allow_variants(len(request.variants))
    runners: dict[str, Runner] = {}
    results: dict[str, VariantResult] = {}
    for label, params in request.variants:
        runner = prepare(request.spec, params)
        if isinstance(runner, Rejected):
            results[label] = VariantResult(label, runner.status, error=runner.headline)
        else:
            runners[label] = runner
    plan = RoundPlan(min_rounds=request.rounds, max_rounds=request.rounds, samples_per_round=request.samples_per_round,
                     target_width=None, budget_s=None)
    rounds: dict[str, list[float]] = {label: [] for label in runners}
    if runners:
        with torch.no_grad(), measure_lock():
            rounds = interleaved_rounds(runners, plan, baseline=next(iter(runners)),
                                        rng=random.Random(request.spec.seed))
    for label, runner in runners.items():
        results[label] = VariantResult(label, Status.OK, compile_s=runner.compile_s, round_ms=tuple(rounds[label]))
    return ConfirmResult(variants=tuple(results[label] for label, _ in request.variants), threads=threads)
