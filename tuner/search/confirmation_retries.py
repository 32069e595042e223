"""A confirmation that outlives a crashing finalist: the driver's reruns, for `tuner.search.verdict`.

A finalist passed its own trial, yet its compile or a call can still kill the confirmation
process (a segfault or an abort in generated code, an illegal address that poisons the device),
or raise while it is timed. `confirm_through` runs the confirmation through an executor's
`run_confirmation`; when a variant other than the default compile took the run down, it records
that variant with its status and measures the others again in a fresh process, until a run
finishes. It never gives up on the whole confirmation for one finalist: only a failure it
cannot pin on such a variant (the default compile's, the process's own, a deadline) comes back.

A run that ran out of memory holding several variants (a large model, each variant a copy of
it) blames none of them: every finalist fitted beside the default in its own trial. That is
`ConfirmResult.crowded` when the process caught the allocation failure, and
`ConfirmFailed.crowded` when the kernel's out-of-memory killer ended it (SIGKILL: on a CPU,
running out of memory is seldom a MemoryError). The rerun holds one variant fewer, the lowest
ranked (the last of the request's order: `tuner.search.verdict` lists finalists best first),
which is recorded as CANCELLED, "not confirmed" and why; eager, the default and the run's
baseline (its first variant) stay. So the best-ranked finalists are confirmed side by side as far
as memory allows, and none is recorded as having crashed for it.

Eager and the default compile are the model itself, never a finalist's fault: a failure pinned
on either is never survived by dropping it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from tuner.trial import DEFAULT, EAGER, ConfirmFailed, ConfirmRequest, ConfirmResult, Status, VariantResult

__all__ = ["confirm_through", "failure_line"]


def confirm_through(run: Callable[[ConfirmRequest], ConfirmResult | ConfirmFailed],
                    request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
    """`run(request)`, again without each variant that crashed it or stopped its rounds, or
    without the lowest ranked one when it ran out of memory holding several (module docstring).

    The result holds every variant of `request` in its order: the ones dropped with how they
    failed (no rounds), the rest as the last, complete run measured them side by side. A
    ConfirmFailed comes back as it is when its process died outside every variant, in eager or
    the default compile, past its deadline, or crowded with only eager, the default and its
    baseline left. At most one run per variant.
    """
    dropped: dict[str, VariantResult] = {}
    while True:
        remaining = tuple(v for v in request.variants if v[0] not in dropped)
        outcome = run(replace(request, variants=remaining))
        culprit = _culprit(outcome, [label for label, _ in remaining])
        if culprit is None:
            if isinstance(outcome, ConfirmFailed):
                return outcome
            merged = {v.label: v for v in outcome.variants} | dropped
            return replace(outcome, variants=tuple(merged[label] for label, _ in request.variants))
        dropped[culprit.label] = culprit


def _culprit(outcome: ConfirmResult | ConfirmFailed, order: list[str]) -> VariantResult | None:
    """The variant to drop and measure the others without (None: the outcome stands); `order`:
    the labels the run held, in the request's order."""
    finalists = set(order) - {DEFAULT, EAGER}
    if outcome.crowded is not None:
        if isinstance(outcome, ConfirmFailed):
            return _lowest_ranked(order, outcome.crowded, failure_line(outcome.error))
        hit = outcome.get(outcome.stopped_by)
        return _lowest_ranked(order, outcome.crowded, failure_line(hit.error) if hit is not None and hit.error
                              else "out of memory")
    if isinstance(outcome, ConfirmFailed):
        if outcome.variant in finalists and outcome.status is Status.CRASHED:
            return VariantResult(outcome.variant, outcome.status, error=failure_line(outcome.error))
        return None
    if outcome.stopped_by in finalists:
        return outcome.get(outcome.stopped_by)
    return None


def _lowest_ranked(order: list[str], crowded: int, why: str) -> VariantResult | None:
    """The variant a crowded run drops: the last one it held but eager, the default and its first
    (None: only those are left, so the outcome stands)."""
    kept = {EAGER, DEFAULT, *order[:1]}
    last = next((label for label in reversed(order) if label not in kept), None)
    if last is None:
        return None
    return VariantResult(last, Status.CANCELLED,
                         error=f"not confirmed: the confirmation ran out of memory holding {crowded} variants "
                               f"at once ({why}); it ran again without this one, the lowest ranked")


def failure_line(error: str) -> str:
    """One line for a failed confirmation process: its headline, and the last line it wrote."""
    lines = error.strip().splitlines()
    return lines[0] + (f" ({lines[-1].strip()})" if len(lines) > 1 else "")
