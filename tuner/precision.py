"""Precision modes: the registry of the opt-in `precision` knob (`tuner search --precision`).

`PRECISIONS` is the registry (a literal dict): fp32 (the default; nothing changes), tf32 (CUDA
only), bf16-autocast, fp16-autocast and bf16. `search_spaces` builds the `precision` knob from it
and `tuner search` checks its flags here (`parse_precisions`, `check_device`, `check_tolerance`).
The other parts of the job live on the floors that use them: a mode is applied per graph by the
one compile implementation (`tuner.inductor.precision`, called by `make_backend`), a candidate
whose precision is not fp32 is accepted only within `--tolerance` of the fp32 eager reference
(`tuner.measure.accuracy`), and a compile call opts in to a stored precision through
`tuner.lookup.opt_in`. Standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tuner.errors import UsageError

FP32 = "fp32"


@dataclass(frozen=True)
class Precision:
    """One precision mode. `autocast` (a torch dtype name) is the autocast dtype the graph is
    compiled under; `cast_inputs` the dtype float32 graph inputs are cast to; `matmul` the float32
    matmul precision set while compiling and calling; `cuda_only` refuses a CPU model."""

    name: str
    summary: str
    autocast: str | None = None
    cast_inputs: str | None = None
    matmul: str | None = None
    cuda_only: bool = False


PRECISIONS: dict[str, Precision] = {
    FP32: Precision(FP32, "float32 as the model is written (nothing changes)"),
    "tf32": Precision("tf32", "TF32 matmuls: float32 matmul precision 'high' (CUDA only)", matmul="high",
                      cuda_only=True),
    "bf16-autocast": Precision("bf16-autocast", "torch.autocast to bfloat16, compiled into the graph",
                               autocast="bfloat16"),
    "fp16-autocast": Precision("fp16-autocast", "torch.autocast to float16, compiled into the graph",
                               autocast="float16"),
    "bf16": Precision("bf16", "float32 inputs and weights cast to bfloat16 in the graph", cast_inputs="bfloat16"),
}


def get_precision(name: str) -> Precision:
    """The mode called `name`; UsageError (one line, listing the choices) for an unknown one."""
    try:
        return PRECISIONS[name]
    except (KeyError, TypeError):
        raise UsageError(f"unknown precision {name!r}; choose from: {', '.join(PRECISIONS)}") from None


def parse_precisions(text: str) -> tuple[str, ...]:
    """`--precision fp32,bf16-autocast` as mode names: fp32 first (always present, the default),
    then the others in the order given, each once. UsageError for an unknown name."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"--precision needs at least one mode; choose from: {', '.join(PRECISIONS)}")
    for name in names:
        get_precision(name)
    return tuple(dict.fromkeys([FP32, *names]))


def check_device(names: Sequence[str], device_type: str) -> None:
    """UsageError when a mode cannot run on `device_type` (tf32 on a CPU model)."""
    for name in names:
        if get_precision(name).cuda_only and device_type != "cuda":
            raise UsageError(f"precision {name} is for CUDA models only (this model runs on {device_type}); "
                             f"drop it from --precision")


def check_tolerance(modes: Sequence[str], tolerance: float | None) -> None:
    """UsageError unless `--tolerance` comes exactly with a `--precision` that changes numerics,
    as a positive number; for an unknown mode, the error of `get_precision`."""
    reduced = [get_precision(m).name for m in modes if get_precision(m).name != FP32]
    if reduced and tolerance is None:
        raise UsageError(f"--precision {','.join(reduced)} changes numerics; give the largest relative error "
                         f"to accept, e.g. --tolerance 1e-2")
    if tolerance is not None and not reduced:
        raise UsageError("--tolerance applies to reduced precision only; add e.g. --precision fp32,bf16-autocast "
                         "or drop --tolerance")
    if tolerance is not None and not 0 < tolerance < float("inf"):
        raise UsageError(f"--tolerance must be a positive number, got {tolerance}")
