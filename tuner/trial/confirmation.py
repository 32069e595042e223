"""A confirmation's request and result: re-measure the finalists against the default compile,
interleaved and paired.

The confirmation process (`tuner.measure.confirmation_run`) gets every variant of a
`ConfirmRequest` ready as a trial does, then runs rounds in which each variant is timed once,
in shuffled order, and returns a `ConfirmResult`. The driver (`speedup`) takes the per-round
ratio baseline/variant, so slow drifts of a noisy machine cancel, and reports the median ratio
with a distribution-free interval. These values cross process boundaries as JSON, like
`TrialRequest` and `Measurement`.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from tuner.trial.stats import MIN_INTERVAL_VALUES, Speedup, paired_speedup
from tuner.trial.timing import RoundPlan
from tuner.trial.values import MeasureSpec, Status

__all__ = ["DEFAULT", "EAGER", "MIN_CONFIRM_ROUNDS", "ConfirmFailed", "ConfirmRequest", "ConfirmResult", "VariantResult",
           "halves", "speedup"]

EAGER = "eager"
DEFAULT = "default"
# Half the rounds choose and half report, and each half needs enough rounds for a 95% interval.
MIN_CONFIRM_ROUNDS = 2 * MIN_INTERVAL_VALUES
ALPHA = 0.05        # a sequential confirmation's error rate per decision, over all its looks


@dataclass(frozen=True)
class ConfirmRequest:
    """The finalists to re-measure, with the search's MeasureSpec (its `timeout_s` covers the
    whole confirmation run)."""

    spec: MeasureSpec
    variants: tuple[tuple[str, tuple[tuple[str, Any], ...] | None], ...]   # (label, params); None = eager
    rounds: int = 20
    samples_per_round: int = 3
    max_rounds: int | None = None          # a sequential test: looks at rounds, 2x, 4x ... up to this many
    target_width: float | None = None      # relative: an interval this narrow is decided (as fast, within it)
    stage: str = "selection"               # with spec.seed, seeds this run's compile and round orders
    #                                        (tuner.search.verdict: "selection", "ablation-N", "claim")

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s

    @property
    def looks(self) -> tuple[int, ...]:
        """The round counts at which a sequential run may stop: `rounds`, doubling up to `max_rounds`
        (that count last); just (`rounds`,) without `max_rounds`."""
        looks = [self.rounds]
        while self.max_rounds is not None and looks[-1] < self.max_rounds:
            looks.append(min(2 * looks[-1], self.max_rounds))
        return tuple(looks)

    @property
    def confidence(self) -> float:
        """The confidence of every interval this run's decisions take: 95%, or with several looks
        1 - ALPHA / looks (Bonferroni), so that a decision is wrong at most ALPHA of the time over all
        the looks the sequential test may take."""
        return 1 - ALPHA / len(self.looks)

    def plan(self) -> RoundPlan:
        """The rounds of this run: the spec's warm-up and calls rule (`MeasureSpec.plan`), `rounds`
        rounds, or with `max_rounds` the sequential test of `RoundPlan.looks` on the even rounds
        (the half that decides), no time budget."""
        looks = self.looks if len(self.looks) > 1 else ()
        return replace(self.spec.plan(), min_rounds=self.rounds, max_rounds=looks[-1] if looks else self.rounds,
                       samples_per_round=self.samples_per_round, target_width=self.target_width if looks else None,
                       budget_s=None, looks=looks, confidence=self.confidence)

    def rng(self, purpose: str) -> random.Random:
        """A generator seeded by the spec's seed, this run's stage and `purpose` ("compile", "rounds"),
        so each stage's process compiles and times in an order of its own, the same on a rerun."""
        return random.Random(f"{self.spec.seed}/{self.stage}/{purpose}")

    @property
    def platform_key(self) -> str | None:
        return self.spec.platform_key

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec.to_json(), "rounds": self.rounds, "samples_per_round": self.samples_per_round,
                "max_rounds": self.max_rounds, "target_width": self.target_width, "stage": self.stage,
                "variants": [[label, None if p is None else [list(kv) for kv in p]] for label, p in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmRequest":
        variants = tuple((label, None if p is None else tuple((k, v) for k, v in p)) for label, p in data["variants"])
        return cls(spec=MeasureSpec.from_json(data["spec"]), variants=variants, rounds=data["rounds"],
                   samples_per_round=data["samples_per_round"], max_rounds=data.get("max_rounds"),
                   target_width=data.get("target_width"), stage=data.get("stage", "selection"))


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
    """What a confirmation run measured: one VariantResult per variant, in the request's order.

    `stopped_by` names the variant whose compile or call failed (its VariantResult says how): the
    run stopped there, every other variant is CANCELLED with no rounds, and the driver measures
    those again in a fresh process (`tuner.search.confirmation_retries`). `crowded` (set only then)
    is how many variants the process held, that one included, when it ran out of memory: the
    run's failure to hold them all, not that variant's, so the driver runs fewer at once."""

    variants: tuple[VariantResult, ...] = field(default=())
    error: str | None = None
    threads: int | None = None        # torch's thread count in the confirmation process
    stopped_by: str | None = None
    crowded: int | None = None

    def get(self, label: str) -> VariantResult | None:
        return next((v for v in self.variants if v.label == label), None)

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "threads": self.threads, "stopped_by": self.stopped_by, "crowded": self.crowded,
                "variants": [{**asdict(v), "status": v.status.value, "round_ms": list(v.round_ms)}
                             for v in self.variants]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmResult":
        variants = tuple(VariantResult(label=v["label"], status=Status(v["status"]), compile_s=v["compile_s"],
                                       round_ms=tuple(v["round_ms"]), error=v["error"]) for v in data["variants"])
        return cls(variants=variants, error=data.get("error"), threads=data.get("threads"),
                   stopped_by=data.get("stopped_by"), crowded=data.get("crowded"))


@dataclass(frozen=True)
class ConfirmFailed:
    """No confirmation result at all: the run passed its deadline (TIMEOUT), its process or Ray
    task died (CRASHED), or the executor cannot confirm (RUNTIME_ERROR). `error` says why, headline
    first. `variant` is the label the process was preparing or timing when it died (None: unknown,
    or it died outside every variant). `crowded`, as `ConfirmResult.crowded`: it was killed by
    SIGKILL, what the kernel's out-of-memory killer sends, while it held that many variants (more
    than one), so it ran out of memory holding them, which says nothing against `variant`."""

    status: Status
    error: str
    variant: str | None = None
    crowded: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "error": self.error, "variant": self.variant, "crowded": self.crowded}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfirmFailed":
        return cls(status=Status(data["status"]), error=data["error"], variant=data.get("variant"),
                   crowded=data.get("crowded"))


def speedup(baseline: VariantResult, variant: VariantResult, *, confidence: float = 0.95) -> Speedup | None:
    """Paired speedup of `variant` over `baseline`, its interval at `confidence`; None if either has no rounds."""
    return paired_speedup(baseline.round_ms, variant.round_ms, confidence=confidence)


def halves(result: ConfirmResult) -> tuple[ConfirmResult, ConfirmResult]:
    """The result split by round parity: (even rounds, odd rounds). What is decided on one half
    (a choice, the gate a config must pass to be stored) and a figure reported from the other are
    independent: the figure's rounds played no part in the decision (no winner's curse, no figure
    inflated by the gate that let it through), and both halves span the whole run in time."""
    def pick(parity: int) -> ConfirmResult:
        return replace(result, variants=tuple(replace(v, round_ms=v.round_ms[parity::2]) for v in result.variants))

    return pick(0), pick(1)
