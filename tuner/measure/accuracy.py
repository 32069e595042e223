"""The accuracy constraint of a reduced precision: how far a candidate may stray from fp32 eager.

A candidate whose precision is not fp32 (`tuner.precision`) is not held to the per-dtype gate of
`tuner.measure.verify`, which would refuse every bfloat16 output; it is accepted only within
`--tolerance` of the fp32 eager reference, by the norm-wise `relative_error`, on the model file's
inputs and on FRESH_INPUT_SETS more (`tuner.measure.core.check_precision` runs the sets).
"""
from __future__ import annotations

import math

import torch

__all__ = ["FRESH_INPUT_SETS", "accuracy_problem", "relative_error"]

FRESH_INPUT_SETS = 3          # random input sets checked beside the model file's own


def relative_error(reference: torch.Tensor, got: torch.Tensor) -> float:
    """Norm-wise relative error: max|got - ref| / max(max|ref|, tiny), in float64.

    ±Inf in the reference must be reproduced in place (it is left out of the norm); NaN or Inf
    where the reference is finite is an infinite error; a reference of zeros divides by the
    smallest normal float32, so any difference there is a huge error.
    """
    ref, out = reference.detach().cpu().double(), got.detach().cpu().double()
    inf = torch.isinf(ref)
    if bool((out[inf] != ref[inf]).any()) or not bool(torch.isfinite(out[~inf]).all()):
        return float("inf")
    ref, out = ref[~inf], out[~inf]
    if ref.numel() == 0:
        return 0.0
    scale = max(float(ref.abs().max()), torch.finfo(torch.float32).tiny)
    return float((out - ref).abs().max()) / scale


def accuracy_problem(reference: list[torch.Tensor], got: list[torch.Tensor]) -> tuple[str | None, float]:
    """(why `got` cannot be compared with `reference`, or None; the largest relative error over
    the floating outputs). Shapes and dtypes must agree and integer outputs must be equal; NaN in
    either (an error that cannot be measured) is a problem, never a pass."""
    if len(reference) != len(got):
        return f"output has {len(got)} tensors, eager has {len(reference)}", float("inf")
    worst = 0.0
    for i, (ref, out) in enumerate(zip(reference, got)):
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return f"output {i}: {tuple(out.shape)} {out.dtype}, eager {tuple(ref.shape)} {ref.dtype}", float("inf")
        if not ref.is_floating_point():
            if not torch.equal(ref.cpu(), out.cpu()):
                return f"output {i}: integer values differ from eager", float("inf")
            continue
        error = relative_error(ref, out)
        if math.isnan(error):       # max(worst, nan) keeps worst: a NaN reference would pass
            where = "eager" if bool(torch.isnan(ref).any()) else "the output"
            return f"output {i}: {where} holds NaN on these inputs, so its error cannot be measured", float("nan")
        worst = max(worst, error)
    return None, worst
