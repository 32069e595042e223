"""Confirmation, trial-process side: re-measure the finalists against the default compile,
interleaved and paired (the request and result values are `tuner.trial`'s)."""
from __future__ import annotations

import random

from tuner.trial import ConfirmRequest, ConfirmResult, Status, VariantResult

__all__ = ["run_confirmation"]


def run_confirmation(request: ConfirmRequest) -> ConfirmResult:
    """Trial-process side: get each variant ready in a fresh model copy, then interleave rounds.

    Each variant goes through `tuner.measure.prepare`, as a trial does. One that fails to
    compile, or whose output differs from eager, is reported with its status and takes no
    part in the rounds.
    """
    import torch

    from tuner.measure.core import Rejected, Runner, allow_variants, apply_threads, prepare
    from tuner.measure.node_lock import measure_lock
    from tuner.trial import RoundPlan, interleaved_rounds

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
        with torch.no_grad(), measure_lock(next(iter(runners.values())).device):
            rounds = interleaved_rounds(runners, plan, baseline=next(iter(runners)),
                                        rng=random.Random(request.spec.seed))
    for label, runner in runners.items():
        results[label] = VariantResult(label, Status.OK, compile_s=runner.compile_s, round_ms=tuple(rounds[label]))
    return ConfirmResult(variants=tuple(results[label] for label, _ in request.variants), threads=threads)
