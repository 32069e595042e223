"""How time is taken: clocks per device and the adaptive, interleaved rounds protocol.

Every timed number of a trial or a confirmation comes from `interleaved_rounds`: after
warm-up, each round times every variant once, in an order shuffled per round, so a slow
drift of the machine hits them all alike. It stops once the paired interval of every
variant against the baseline is narrower than `RoundPlan.target_width`, once its time
budget is spent, or at `max_rounds`, and never before `min_rounds`; a caller's `should_stop`
(pruning, `tuner.trial.pruning`) may stop it earlier.

Clocks: on CPU a sample is `calls` back-to-back calls timed with `perf_counter`. On CUDA
(`CudaClock`) a sample is one pair of CUDA events around `calls` back-to-back calls: the L2
cache is flushed first, then the host waits for the device, so the start event is recorded on
an idle GPU and the host work of the calls (Dynamo guards, the Python wrapper, launches) lies
inside the pair, as a user sees it. Every device call names the variant's device, never the
current one.

Calls per sample (`calls_per_sample`): every variant of one run takes the same number, enough
for the fastest to last MIN_SAMPLE_S (CPU) or MIN_CUDA_SAMPLE_S (CUDA), unless that would make a
sample longer than LONG_SAMPLE_S; then each variant takes enough for its own samples to last
LONG_SAMPLE_S. A sample has a fixed cost (on CUDA the host time to the first kernel on an idle
GPU and one cold-L2 call, on CPU a cold cache after another variant): with one count it adds
the same time to every variant's per-call figure, so a difference between variants is measured
whole and a ratio can only move toward 1, never show a gain that is not there. With a count per
variant, rounded up to whole calls, samples of 1-2 ms spread it unevenly: 1-3%, the size of the
gains claimed. Samples of 10 ms or more hold it to about 0.2% whatever the counts.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from tuner.trial.cuda_api import CudaApi, flush_buffer, torch_cuda
from tuner.trial.stats import paired_speedup

MIN_SAMPLE_S = 0.002          # one CPU sample lasts at least this long
MIN_CUDA_SAMPLE_S = 0.001     # one CUDA event pair spans at least this long (events resolve ~0.5 us)
LONG_SAMPLE_S = 0.010         # samples this long may differ in calls: a fixed cost is ~0.2% of them


class Timed(Protocol):
    """What can be timed: a ready-to-call variant (`tuner.measure.Runner`)."""

    call: Callable[[], Any]
    sync: Callable[[], None]
    device: str


@dataclass(frozen=True)
class RoundPlan:
    """When the rounds stop: never before `min_rounds`, at `max_rounds` at the latest, as soon
    as every variant's paired interval is narrower than `target_width` (relative to its median;
    None: run to max_rounds), or once `budget_s` seconds of rounds have passed.

    With `looks` (a sequential test: a confirmation's, `tuner.trial.confirmation`), the rounds stop
    only at those counts, as soon as every variant's interval against the baseline, at `confidence`
    and on the even rounds only (the half that decides), is decided: wholly above 1, wholly below,
    or narrower than `target_width` (as fast, within it). At most `looks[-1]` rounds."""

    min_rounds: int = 6
    max_rounds: int = 20
    samples_per_round: int = 3
    target_width: float | None = 0.05
    budget_s: float | None = 10.0
    warmup: int = 3
    same_calls: bool = False      # one count even for long samples (train: as many optimizer steps each)
    looks: tuple[int, ...] = ()
    confidence: float = 0.95


def per_call_s(fn: Callable[[], Any], *, warmup: int, sync: Callable[[], None]) -> float:
    """Run `warmup` calls (at least one) and wait for the device; the seconds one call took on average."""
    start = time.perf_counter()
    for _ in range(max(1, warmup)):
        fn()
    sync()
    return (time.perf_counter() - start) / max(1, warmup)


def _enough(per_call: float, seconds: float) -> int:
    return max(1, math.ceil(seconds / max(per_call, 1e-7)))


def calibrate(fn: Callable[[], Any], *, warmup: int, sync: Callable[[], None],
              min_sample_s: float = MIN_SAMPLE_S) -> int:
    """Run `warmup` calls; return how many calls one timed sample of `fn` alone needs to last `min_sample_s`.
    (A run of several variants decides their counts together: `calls_per_sample`.)"""
    return _enough(per_call_s(fn, warmup=warmup, sync=sync), min_sample_s)


def calls_per_sample(per_call: Mapping[str, float], min_sample_s: float, *, same: bool = False) -> dict[str, int]:
    """Calls per timed sample for each variant of one run, from its seconds per call (`per_call_s`).

    One count for all: the largest any variant needs to last `min_sample_s` (the fastest's).
    Where that count makes some variant's sample longer than LONG_SAMPLE_S (a variant many
    times slower than the fastest), each variant instead gets the count that makes its own
    samples last LONG_SAMPLE_S, unless `same` (training: every variant takes as many optimizer
    steps). The module docstring says why.
    """
    common = max(_enough(seconds, min_sample_s) for seconds in per_call.values())
    if same or all(common * seconds <= LONG_SAMPLE_S for seconds in per_call.values()):
        return dict.fromkeys(per_call, common)
    return {label: _enough(seconds, LONG_SAMPLE_S) for label, seconds in per_call.items()}


def time_samples(fn: Callable[[], Any], *, calls: int, samples: int, sync: Callable[[], None]) -> list[float]:
    """`samples` CPU-clock timings in ms per call, each over `calls` back-to-back calls."""
    out = []
    for _ in range(samples):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - start) * 1000.0 / calls)
    return out


class CudaClock:
    """CUDA events around `calls` back-to-back calls on `device`, after flushing its L2 cache and
    waiting for the flush to finish (so the pair holds the calls' host work, not just their
    kernels). `api` drives the device (default: torch.cuda)."""

    def __init__(self, device: str, api: CudaApi | None = None) -> None:
        self.device, self.api = device, api if api is not None else torch_cuda()
        self.flush = flush_buffer(device, self.api)

    def samples(self, fn: Callable[[], Any], *, calls: int, samples: int) -> list[float]:
        api, device = self.api, self.device
        out = []
        for _ in range(samples):
            self.flush.zero_()
            start, end = api.event(), api.event()
            api.synchronize(device)        # without it the flush hides up to its own length of host work
            start.record(api.current_stream(device))
            for _ in range(calls):
                fn()
            end.record(api.current_stream(device))
            api.synchronize(device)
            out.append(start.elapsed_time(end) / calls)
        return out


def sampler_for(variant: Timed, calls: int, samples: int, cuda: CudaApi | None = None) -> Callable[[], list[float]]:
    """A function that takes `samples` timings (ms per call) of `variant` with its device's clock."""
    if variant.device.startswith("cuda"):
        clock = CudaClock(variant.device, cuda)
        return lambda: clock.samples(variant.call, calls=calls, samples=samples)
    return lambda: time_samples(variant.call, calls=calls, samples=samples, sync=variant.sync)


def min_sample_s(device: str) -> float:
    return MIN_CUDA_SAMPLE_S if device.startswith("cuda") else MIN_SAMPLE_S


def interleaved_rounds(variants: Mapping[str, Timed], plan: RoundPlan, *, baseline: str, rng: random.Random,
                       should_stop: Callable[[Mapping[str, list[float]]], bool] | None = None,
                       cuda: CudaApi | None = None,
                       on_variant: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Per variant, its per-round latency (ms, median of the round's samples), rounds paired by index.

    The caller holds the node's measure lock and torch.no_grad. `baseline` names the variant
    every other is compared with for the stopping rule. `should_stop` (pruning) is called with
    the rounds so far after each round the plan would go on from (never after the last one);
    True stops the rounds there. `cuda` drives CUDA variants' clocks (default: torch.cuda).
    `on_variant` is told each variant's label before its calibration and before each of its
    turns, outside the timed calls (a confirmation keeps it, so a crash names its variant).
    Every variant's warm-up calls come first, then `calls_per_sample` decides their counts together.
    """
    mark = on_variant or (lambda label: None)
    per_call = {}
    for label, v in variants.items():
        mark(label)
        per_call[label] = per_call_s(v.call, warmup=plan.warmup, sync=v.sync)
    shortest = max(min_sample_s(v.device) for v in variants.values())
    calls = calls_per_sample(per_call, shortest, same=plan.same_calls)
    take = {label: sampler_for(v, calls[label], plan.samples_per_round, cuda) for label, v in variants.items()}
    rounds: dict[str, list[float]] = {label: [] for label in variants}
    start = time.perf_counter()
    for n in range(1, (plan.looks[-1] if plan.looks else plan.max_rounds) + 1):
        for label in rng.sample(list(variants), len(variants)):
            mark(label)
            rounds[label].append(statistics.median(take[label]()))
        if plan.looks:
            if n in plan.looks and decided(rounds, baseline, plan):
                break
        elif n >= plan.min_rounds and (_narrow(rounds, baseline, plan.target_width)
                                       or _spent(start, plan.budget_s)):
            break
        if should_stop is not None and n < plan.max_rounds and should_stop(rounds):
            break
    return rounds


def _narrow(rounds: Mapping[str, list[float]], baseline: str, target: float | None) -> bool:
    if target is None:
        return False
    widths = [paired_speedup(rounds[baseline], ms) for label, ms in rounds.items() if label != baseline]
    return all(sp is not None and sp.width <= target for sp in widths)


def decided(rounds: Mapping[str, Sequence[float]], baseline: str, plan: RoundPlan) -> bool:
    """Every variant's interval against `baseline` on the even rounds, at the plan's confidence, lies
    wholly above or below 1 or is narrower than its target width."""
    for label, ms in rounds.items():
        if label == baseline:
            continue
        sp = paired_speedup(rounds[baseline][0::2], ms[0::2], confidence=plan.confidence)
        if sp is None or not (sp.clears_noise or sp.slower_beyond_noise
                              or (plan.target_width is not None and sp.width <= plan.target_width)):
            return False
    return True


def _spent(start: float, budget_s: float | None) -> bool:
    return budget_s is not None and time.perf_counter() - start >= budget_s
