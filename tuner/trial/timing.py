"""How time is taken: clocks per device and the adaptive, interleaved rounds protocol.

Every timed number of a trial or a confirmation comes from `interleaved_rounds`: after
warm-up, each round times every variant once, in an order shuffled per round, so a slow
drift of the machine hits them all alike. It stops once the paired interval of every
variant against the baseline is narrower than `RoundPlan.target_width`, once its time
budget is spent, or at `max_rounds`, and never before `min_rounds`; a caller's `should_stop`
(pruning, `tuner.trial.pruning`) may stop it earlier.

Clocks: on CPU a sample is `calls` back-to-back calls timed with `perf_counter` (enough
calls to last MIN_SAMPLE_S, so the clock's grain is noise-free). On CUDA (`CudaClock`) a
sample is one pair of CUDA events around `calls` back-to-back calls (enough to last
MIN_CUDA_SAMPLE_S): the L2 cache is flushed first, then the host waits for the device, so
the start event is recorded on an idle GPU and the host work of the calls (Dynamo guards,
the Python wrapper, launches) lies inside the pair, as a user sees it. Every device call
names the variant's device, never the current one.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from tuner.trial.cuda_api import CudaApi, flush_buffer, torch_cuda
from tuner.trial.stats import paired_speedup

MIN_SAMPLE_S = 0.002          # one CPU sample lasts at least this long
MIN_CUDA_SAMPLE_S = 0.001     # one CUDA event pair spans at least this long (events resolve ~0.5 us)


class Timed(Protocol):
    """What can be timed: a ready-to-call variant (`tuner.measure.Runner`)."""

    call: Callable[[], Any]
    sync: Callable[[], None]
    device: str


@dataclass(frozen=True)
class RoundPlan:
    """When the rounds stop: never before `min_rounds`, at `max_rounds` at the latest, as soon
    as every variant's paired interval is narrower than `target_width` (relative to its median;
    None: run to max_rounds), or once `budget_s` seconds of rounds have passed."""

    min_rounds: int = 6
    max_rounds: int = 20
    samples_per_round: int = 3
    target_width: float | None = 0.05
    budget_s: float | None = 10.0
    warmup: int = 3
    same_calls: bool = False      # every variant as many calls per sample (train: as many optimizer steps)


def calibrate(fn: Callable[[], Any], *, warmup: int, sync: Callable[[], None],
              min_sample_s: float = MIN_SAMPLE_S) -> int:
    """Run `warmup` calls; return how many calls one timed sample needs to last `min_sample_s`."""
    start = time.perf_counter()
    for _ in range(max(1, warmup)):
        fn()
    sync()
    per_call = (time.perf_counter() - start) / max(1, warmup)
    return max(1, math.ceil(min_sample_s / max(per_call, 1e-7)))


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
    """
    mark = on_variant or (lambda label: None)
    calls = {}
    for label, v in variants.items():
        mark(label)
        calls[label] = calibrate(v.call, warmup=plan.warmup, sync=v.sync, min_sample_s=min_sample_s(v.device))
    if plan.same_calls:
        calls = dict.fromkeys(calls, max(calls.values()))
    take = {label: sampler_for(v, calls[label], plan.samples_per_round, cuda) for label, v in variants.items()}
    rounds: dict[str, list[float]] = {label: [] for label in variants}
    start = time.perf_counter()
    for n in range(1, plan.max_rounds + 1):
        for label in rng.sample(list(variants), len(variants)):
            mark(label)
            rounds[label].append(statistics.median(take[label]()))
        if n >= plan.min_rounds and (_narrow(rounds, baseline, plan.target_width)
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


def _spent(start: float, budget_s: float | None) -> bool:
    return budget_s is not None and time.perf_counter() - start >= budget_s
