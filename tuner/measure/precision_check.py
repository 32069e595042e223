"""The accuracy constraint of a candidate compiled in reduced precision (`--precision`), checked by
`tuner.measure.core.prepare` in place of the fp32 gate."""
from __future__ import annotations

from typing import Any

import torch

from tuner.measure.accuracy import FRESH_INPUT_SETS, accuracy_problem
from tuner.measure.prepared import Rejected
from tuner.trial import MeasureSpec, Status

__all__ = ["check_precision"]


def check_precision(spec: MeasureSpec, loaded: Any, model: Any, reference: list[torch.Tensor],
                    calls: list[list[torch.Tensor]], precision: str) -> str | Rejected:
    """The accuracy constraint of a candidate in reduced `precision`: on the file's inputs (each of
    `calls`, the first call's outputs and the later ones' (cudagraph replays), against `reference`)
    and on FRESH_INPUT_SETS more input sets (`get_inputs()` under the seeds
    after `spec.seed`), the norm-wise relative error against the fp32 eager output
    (`tuner.measure.accuracy.relative_error`) must stay within `spec.tolerance`. Returns the line that
    reports the error measured, or a WRONG_RESULT `Rejected` that says it (a call that fails on
    fresh inputs raises, and `prepare` rejects it like a failing first call)."""
    from tuner.measure.node_lock import compile_lock
    from tuner.workload import flatten_outputs

    tolerance = spec.tolerance
    if tolerance is None:
        return Rejected(Status.WRONG_RESULT, f"precision {precision} needs an accuracy tolerance; "
                                             f"search with --tolerance (e.g. --tolerance 1e-2)")
    problem, worst, seen = None, 0.0, 0
    for got in calls:                 # the file's inputs: the first call, then the later ones
        (problem, error), seen = accuracy_problem(reference, got), seen + 1
        worst = max(worst, error)
        if problem is not None or worst > tolerance:
            break
    sets = 1
    with torch.no_grad(), compile_lock(loaded.device):
        while problem is None and worst <= tolerance and sets <= FRESH_INPUT_SETS:
            fresh = loaded.with_inputs(spec.seed + sets)
            expected = [t.clone() for t in flatten_outputs(fresh.call())]
            got = flatten_outputs(fresh.call(model))     # raising: prepare rejects it like a first call
            problem, error = accuracy_problem(expected, got)
            worst, sets = max(worst, error), sets + 1
    where = f"on {sets} input set{'s' if sets > 1 else ''}"
    where = f"call {seen} on the file's inputs, after a first that matched" if sets == 1 and seen > 1 else where
    if problem is not None:
        return Rejected(Status.WRONG_RESULT, f"precision {precision}: {problem} ({where})")
    if worst > tolerance:
        return Rejected(Status.WRONG_RESULT, f"precision {precision}: max relative error {worst:.3g} exceeds "
                                             f"--tolerance {tolerance:g} ({where})")
    return f"precision {precision}: max relative error {worst:.3g} within --tolerance {tolerance:g} ({where})"
