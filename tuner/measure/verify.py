"""The correctness gate: a compiled output against eager, with tolerances that scale with the values.

Floating (and complex) outputs are judged against an fp64 eager reference, as PyTorch's own
benchmark harness does (`torch._dynamo.utils.same` with `fp64_ref`): the compiled output's
RMS error against fp64 may be at most ERROR_MULTIPLIER times eager's own RMS error against
fp64, plus EPS of the reference's RMS. So a correct config passes wherever eager itself is
inexact (TF32 convolutions, which cuDNN uses by default on Ampere and later, reordered
reductions), and an output that is wrong only where values are small (a zeroed gradient, a
softmax's tail) fails, which a fixed `atol` lets through. Complex values compare by the
magnitude of their difference. Where no fp64 reference can be made (the model does not run
in float64), the RMS error against fp32 eager may be at most FALLBACK_RTOL of its RMS.
An RMS bound alone lets a few elements be garbage (about 0.03% of a bf16 tensor, as in
`torch._dynamo.utils.same`), so against fp64 each element is bounded too: no value may be off fp64
eager by more than OUTLIER_MULTIPLIER times eager's own largest error there, plus EPS of the
largest reference value. A correct compile rounds differently from eager, not ten times worse.
Integer outputs (argmax, topk indices) must equal eager's except where fp64 eager picks the
compiled value too: a tie that rounding decided; the gate says when it accepted one.
Gradients (and the loss) of a training step go through the same gate per parameter against an
fp64 eager step (`compare_gradients` with `fp64`); where the step does not run in float64, by
norm-relative error and cosine similarity against fp32 eager (GRADIENT_TOLERANCES).
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ERROR_MULTIPLIER", "OUTLIER_MULTIPLIER", "Verdict", "compare_gradients", "compare_outputs",
           "eager_precision", "fp64_reference", "verify_outputs", "widen", "widened_model"]

ERROR_MULTIPLIER = 3.0
OUTLIER_MULTIPLIER = 10.0     # one element's error against fp64, in units of eager's largest there
# EPS: the error allowed on top, relative to the reference's RMS; FALLBACK_RTOL: without fp64.
EPS = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
FALLBACK_RTOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
# Gradients without an fp64 step: (largest norm-relative error, smallest cosine similarity) per parameter.
GRADIENT_TOLERANCES = {torch.float64: (1e-9, 1 - 1e-12), torch.float32: (5e-3, 0.9999),
                       torch.float16: (5e-2, 0.999), torch.bfloat16: (1e-1, 0.99)}


@dataclass(frozen=True)
class Verdict:
    """`mismatch`: why the output fails (None: it passes); `note`: what a pass had to allow."""

    mismatch: str | None = None
    note: str | None = None


def _real_dtype(t: torch.Tensor) -> torch.dtype:
    return t.real.dtype if t.is_complex() else t.dtype


def widen(t: Any) -> Any:
    """`t` in float64 (complex128) when it is a floating (complex) tensor, else `t` itself."""
    if isinstance(t, torch.Tensor) and t.is_complex():
        return t.to(torch.complex128)
    if isinstance(t, torch.Tensor) and t.is_floating_point():
        return t.double()
    return t


def widened_model(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` with its floating parameters and buffers in float64 (complex128), made
    without a full-precision copy first (`deepcopy(model).double()` held the model, its copy and
    the float64 one at once: 6x a bf16 model), so it adds only the float64 weights."""
    memo: dict[int, Any] = {}
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in memo:
            wide = widen(t.detach())
            wide = wide.clone() if wide.data_ptr() == t.data_ptr() else wide     # integer, or float64 already
            memo[id(t)] = torch.nn.Parameter(wide, t.requires_grad) if isinstance(t, torch.nn.Parameter) else wide
    return copy.deepcopy(model, memo)


def fp64_reference(loaded: Any) -> list[torch.Tensor] | None:
    """The model file's eager output with its model and inputs in float64 (complex128), on the
    host; None where the model does not run so (an op without float64, a cast of its own, a
    Triton kernel without float64 support: any exception). The float64 model is freed before this
    returns, and the output is moved off the device, so neither holds device memory while a
    config compiles. Its `@tuner.autotune` kernels run untuned (`tuner.kernels.untuned_launches`):
    no float64 config is searched or stored."""
    from tuner.kernels import untuned_launches
    from tuner.workload import flatten_outputs

    try:
        wide = dataclasses.replace(loaded, model=widened_model(loaded.model),
                                   args=tuple(widen(t) for t in loaded.args),
                                   kwargs={k: widen(t) for k, t in loaded.kwargs.items()})
        with torch.no_grad(), untuned_launches():
            out = [t.detach().cpu() for t in flatten_outputs(wide.call())]
        del wide
        return out
    except Exception:  # noqa: BLE001 - the gate falls back to fp32 eager with FALLBACK_RTOL (module docstring)
        return None


def compare_outputs(reference: list[torch.Tensor], got: list[torch.Tensor],
                    fp64: list[torch.Tensor] | None = None) -> str | None:
    """None when `got` passes the gate against `reference` (fp32 eager) and `fp64`, else why not."""
    return verify_outputs(reference, got, fp64).mismatch


def verify_outputs(reference: list[torch.Tensor], got: list[torch.Tensor],
                   fp64: list[torch.Tensor] | None = None, *, floor: float = 0.0) -> Verdict:
    """The gate (module docstring) over every output tensor.

    Never passes vacuously: a reference with no tensor, or with NaN (which would match any NaN),
    is a mismatch; the driver refuses such model files before any trial
    (`tuner.workload.eager_reference`). NaN or Inf where the reference is finite is a mismatch,
    and where the reference is ±Inf the output must hold the same Inf. `fp64` that does not
    line up with `reference` (count, shapes) is ignored. `floor`: eager's error relative to the
    values is taken as at least this (`eager_precision` of a training step, whose loss is one value).
    """
    if not reference:
        return Verdict("eager output holds no tensor, so there is nothing to compare")
    if len(reference) != len(got):
        return Verdict(f"output has {len(got)} tensors, eager has {len(reference)}")
    if fp64 is not None and (len(fp64) != len(reference) or any(a.shape != b.shape for a, b in zip(fp64, reference))):
        fp64 = None
    notes = []
    for i, (ref, out) in enumerate(zip(reference, got)):
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return Verdict(f"output {i}: {tuple(out.shape)} {out.dtype}, eager {tuple(ref.shape)} {ref.dtype}")
        ref, out = ref.detach().cpu(), out.detach().cpu()
        wide = None if fp64 is None else fp64[i].detach().cpu()
        if ref.is_floating_point() or ref.is_complex():
            problem = _compare_floats(ref, out, wide, floor)
        else:
            problem, note = _compare_integers(ref, out, wide)
            if note:
                notes.append(f"output {i}: {note}")
        if problem:
            return Verdict(f"output {i}: {problem}")
    return Verdict(None, "; ".join(notes) or None)


def _compare_integers(ref: torch.Tensor, out: torch.Tensor, wide: torch.Tensor | None) -> tuple[str | None, str | None]:
    differ = out != ref
    if not bool(differ.any()):
        return None, None
    count, total = int(differ.sum()), ref.numel()
    if wide is not None and wide.dtype == ref.dtype and bool((out[differ] == wide[differ]).all()):
        return None, (f"{count} of {total} integer values differ from fp32 eager where fp64 eager gives the "
                      f"compiled value too (ties, as argmax/topk break them by rounding)")
    return (f"integer values differ from eager at {count} of {total} positions; argmax/topk results may differ "
            f"only at ties (where fp64 eager picks the compiled value too), and these are not ties"), None


def _rms(t: torch.Tensor) -> float:
    return float(t.abs().double().square().mean().sqrt()) if t.numel() else 0.0


def _compare_floats(ref: torch.Tensor, out: torch.Tensor, wide: torch.Tensor | None, floor: float = 0.0) -> str | None:
    if bool(torch.isnan(ref).any()):
        return f"eager holds {int(torch.isnan(ref).sum())} NaN values, so nothing can match it"
    bad = ~torch.isfinite(out) & torch.isfinite(ref)
    if bool(bad.any()):
        return f"{int(bad.sum())} NaN/Inf values where eager is finite"
    inf = torch.isinf(ref)
    wrong_inf = int((out[inf] != ref[inf]).sum())     # NaN, a finite value or the other sign
    if wrong_inf:
        return f"{wrong_inf} values differ from eager's ±Inf (an Inf must keep its position and sign)"
    dtype = _real_dtype(ref)
    ref, out = ref[~inf], out[~inf]
    if wide is not None and bool(torch.isfinite(wide[~inf]).all()):
        wide = wide[~inf].to(torch.complex128 if ref.is_complex() else torch.float64)
        eager_off, off = (ref.to(wide.dtype) - wide).abs(), (out.to(wide.dtype) - wide).abs()
        err, scale = _rms(off), _rms(wide)
        eager_err = max(_rms(eager_off), floor * scale)
        allowed = ERROR_MULTIPLIER * eager_err + EPS.get(dtype, 1e-5) * scale + torch.finfo(dtype).tiny
        if err > allowed:
            return (f"RMS error {err:.3g} against fp64 eager exceeds {ERROR_MULTIPLIER:g}x eager's own "
                    f"{eager_err:.3g} + {EPS.get(dtype, 1e-5):g} of the values' RMS {scale:.3g} ({dtype})")
        return _outliers(eager_off, off, wide, dtype, floor)
    err, scale = _rms(out.to(torch.complex128 if ref.is_complex() else torch.float64) - ref), _rms(ref)
    rtol = FALLBACK_RTOL.get(dtype, 1e-4)
    if err > rtol * scale + torch.finfo(dtype).tiny:
        return (f"RMS error {err:.3g} against eager exceeds {rtol:g} of the values' RMS {scale:.3g} "
                f"({dtype} tolerance; the model did not run in float64 for a finer check)")
    return None


def _outliers(eager_off: torch.Tensor, off: torch.Tensor, wide: torch.Tensor, dtype: torch.dtype,
              floor: float) -> str | None:
    """Elements off fp64 eager by more than OUTLIER_MULTIPLIER times eager's largest error (plus EPS
    of the largest value): the few garbage values an RMS bound lets through (module docstring)."""
    if not off.numel():
        return None
    largest = float(wide.abs().max())
    eager_max = max(float(eager_off.max()), floor * largest)
    limit = OUTLIER_MULTIPLIER * eager_max + EPS.get(dtype, 1e-5) * largest + torch.finfo(dtype).tiny
    worst = float(off.max())
    if worst <= limit:
        return None
    count = int((off > limit).sum())
    return (f"{count} of {off.numel()} values are off fp64 eager by up to {worst:.3g}, beyond "
            f"{OUTLIER_MULTIPLIER:g}x eager's largest error {eager_max:.3g} + {EPS.get(dtype, 1e-5):g} of the "
            f"largest value {largest:.3g} ({dtype})")


def eager_precision(reference: list[torch.Tensor], fp64: list[torch.Tensor]) -> float:
    """Eager's largest RMS error against fp64 relative to the values' RMS, over the floating
    tensors of a training step (loss and gradients): how exact eager computes that step. A tensor
    of one value (the loss, a bias of one) says little alone: eager may hit fp64 by chance."""
    worst = 0.0
    for ref, wide in zip(reference, fp64, strict=True):
        if (ref.is_floating_point() or ref.is_complex()) and ref.numel() and bool(torch.isfinite(wide).all()):
            wide = wide.detach().cpu().to(torch.complex128 if ref.is_complex() else torch.float64)
            scale = _rms(wide)
            if scale:
                worst = max(worst, _rms(ref.detach().cpu().to(wide.dtype) - wide) / scale)
    return worst


def compare_gradients(reference: list[torch.Tensor], got: list[torch.Tensor],
                      fp64: list[torch.Tensor] | None = None, *, floor: float = 0.0) -> str | None:
    """None when each tensor of `got` (a parameter's gradient, or the loss) passes against
    `reference` (fp32 eager), else why not. With `fp64` (the same step in float64) it is the
    output gate's (`verify_outputs`: RMS error against fp64 within a margin of eager's own, taken
    as at least `floor` of the values, the step's `eager_precision`; no outliers), so a correct
    compile of a step whose eager is inexact (TF32) passes; without it,
    a norm-relative error and a cosine similarity within GRADIENT_TOLERANCES of its dtype (NaN
    or Inf where eager is finite always fails)."""
    if fp64 is not None:
        return verify_outputs(reference, got, fp64, floor=floor).mismatch
    for i, (ref, out) in enumerate(zip(reference, got, strict=True)):
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return f"output {i}: {tuple(out.shape)} {out.dtype}, eager {tuple(ref.shape)} {ref.dtype}"
        ref, out = ref.detach().cpu().double().flatten(), out.detach().cpu().double().flatten()
        if not bool(torch.isfinite(out[torch.isfinite(ref)]).all()):
            return f"output {i}: NaN/Inf values where eager is finite"
        max_rel, min_cos = GRADIENT_TOLERANCES.get(reference[i].dtype, GRADIENT_TOLERANCES[torch.float32])
        norm = float(ref.norm())
        rel = float((out - ref).norm()) / max(norm, torch.finfo(torch.float32).tiny)
        cos = float(torch.dot(out, ref)) / max(norm * float(out.norm()), 1e-300) if norm else 1.0
        if rel > max_rel or (norm and cos < min_cos) or math.isnan(rel):
            return (f"output {i}: norm-relative error {rel:.3g} (at most {max_rel:g}), cosine similarity {cos:.6f} "
                    f"(at least {min_cos:g})")
    return None
