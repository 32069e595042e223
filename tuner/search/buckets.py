"""A search over shape buckets (`tuner search model.py --shapes "batch=1,8,32"`): one search per bucket.

Each bucket is an ordinary `tuner.search.run_search` whose `MeasureSpec.shape` holds the
bucket's sizes, so its trials, confirmation and stored configs are those of the model file with
`get_inputs(batch=8)`: its graphs are fingerprinted at that shape (workload `model[batch=8]`)
and each gets its own best config under its own graph keys. `--trials` counts per bucket; the time
left of `--budget` is shared equally by the buckets still to search.
What a bucket contributes to the objective is its confirmed latency (held-out rounds, as stored)
times its weight: `BucketSearch.weighted` gives the sum for the tuned configs and for the
default compile. At compile time each bucket's shape finds its own config with
`torch.compile(model, backend="tuner", dynamic=False)` (docs/lookup.md).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tuner.errors import ModelFileError
from tuner.search.budget import share
from tuner.search.options import SearchOptions
from tuner.search.pipeline import Execution, SearchEvents, SearchResult, run_search
from tuner.trial import DEFAULT, EAGER, halves
from tuner.workload import Bucket, ShapeBuckets, weighted

if TYPE_CHECKING:
    from tuner.search.verdict import Verdict
    from tuner.settings import Settings

__all__ = ["BucketResult", "BucketSearch", "bucket_latency", "check_buckets", "run_bucket_search"]


@dataclass(frozen=True)
class BucketResult:
    """One bucket's search: one SearchResult per platform, as `run_search` returns them."""

    bucket: Bucket
    results: tuple[SearchResult, ...]


@dataclass(frozen=True)
class BucketSearch:
    """Every bucket's search, in the order of `--shapes`."""

    buckets: tuple[BucketResult, ...]

    def platforms(self) -> list[str]:
        """The platform keys searched, in the order the first bucket searched them."""
        return list(dict.fromkeys(r.target.platform.key for b in self.buckets for r in b.results))

    def latencies(self, platform_key: str) -> list[tuple[Bucket, tuple[float, float] | None]]:
        """Per bucket, (default ms, tuned ms) on `platform_key`; None where no trial ran correctly."""
        rows = []
        for b in self.buckets:
            result = next((r for r in b.results if r.target.platform.key == platform_key), None)
            rows.append((b.bucket, None if result is None or result.verdict is None
                         else bucket_latency(result.verdict)))
        return rows

    def weighted(self, platform_key: str) -> tuple[float, float] | None:
        """(default, tuned) weighted latency in ms on `platform_key`: the sum of weight x latency over
        the buckets; None when some bucket has no figure (its weight cannot be left out honestly)."""
        rows = self.latencies(platform_key)
        if any(figures is None for _, figures in rows):
            return None
        buckets = [b for b, _ in rows]
        return (weighted(buckets, [f[0] for _, f in rows if f is not None]),
                weighted(buckets, [f[1] for _, f in rows if f is not None]))


def bucket_latency(verdict: "Verdict") -> tuple[float, float]:
    """(default compile ms, stored choice ms) from the held-out rounds of the verdict's claim run,
    the figures `tuner.search.verdict.best_configs` stores; where the defaults stay, both are the default's."""
    held_out = halves(verdict.claim_run)[1]
    base = held_out.get(DEFAULT).latency_ms     # a verdict exists only where the default was timed
    if verdict.stored is None and not verdict.eager:
        return base, base
    return base, held_out.get(EAGER if verdict.stored is None else verdict.stored.label).latency_ms


def check_buckets(options: SearchOptions, buckets: ShapeBuckets) -> None:
    """Before any search: each bucket's inputs load (ModelFileError from the loader: `get_inputs`
    takes no such argument, or fails at that size), and no two buckets give inputs of the same
    shapes (they would be one workload, and their configs would overwrite each other)."""
    from tuner.workload import load_model_file

    measure = options.measure
    seen: dict[tuple, Bucket] = {}
    for bucket in buckets.buckets:
        loaded = load_model_file(measure.model_path, seed=measure.seed, shape=bucket.sizes)
        shapes = tuple(tuple(t.shape) for t in (*loaded.args, *loaded.kwargs.values()))
        if shapes in seen:
            raise ModelFileError(
                f"get_inputs() in {loaded.path} returns inputs of the same shapes for {seen[shapes].label()} and "
                f"{bucket.label()}; build the inputs with the size it is given, e.g. torch.randn(batch, 32)")
        seen[shapes] = bucket


def run_bucket_search(options: SearchOptions, buckets: ShapeBuckets, *, execution: Execution = Execution(),
                      settings: "Settings | None" = None, events: SearchEvents | None = None) -> BucketSearch:
    """Search, confirm and store one config per bucket: `run_search` once per bucket, each with
    `options.trials` trials on that bucket's inputs (`check_buckets` first, so a bad bucket stops
    the search before anything is written). Raises what `run_search` raises; an interrupt stops
    at the bucket it reached, with the earlier buckets stored. `options.budget_s` covers them all."""
    began = time.monotonic()
    check_buckets(options, buckets)
    done = []
    for n, bucket in enumerate(buckets.buckets):
        job = replace(options, measure=replace(options.measure, shape=bucket.sizes),
                      budget_s=share(options.budget_s, began, len(buckets.buckets) - n))
        done.append(BucketResult(bucket, tuple(run_search(job, execution=execution, settings=settings,
                                                          events=events))))
    return BucketSearch(tuple(done))
