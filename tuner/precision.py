"""Precision modes: the opt-in `precision` knob (`tuner search --precision`), applied per graph.

`PRECISIONS` is the registry (a literal dict). A mode is applied by the one compile
implementation (`tuner.inductor.compiler.make_backend`), per graph, so a trial measures exactly what
lookup later applies:

- `fp32`: nothing changes (the default; a candidate never stores it).
- `bf16-autocast`, `fp16-autocast`: Inductor compiles the graph inside `torch.autocast(device,
  dtype)`, so AOTAutograd bakes autocast's casts into the compiled graph (verified on torch 2.13
  CPU: the output equals eager under autocast, bit for bit); no autocast is needed at call time.
- `bf16`: every float32 input of the graph (with Dynamo's default of lifting parameters, the
  weights too) is cast to bfloat16 at the start of the graph. With `freezing`, Inductor folds
  the weights' casts into bfloat16 constants; without it they are casts on every call.
- `tf32` (CUDA only): float32 matmul precision "high" while compiling and around every call.

Every mode casts the graph's floating outputs back to the dtype Dynamo traced them with, so the
program around a graph sees the dtypes it would see without tuner. A candidate whose precision
is not fp32 is accepted only within `--tolerance` of the fp32 eager reference, by the norm-wise
`relative_error` (see `tuner.measure`). This module imports torch only inside functions.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from tuner.errors import UsageError

if TYPE_CHECKING:
    import torch

FP32 = "fp32"
OPTION = "precision"          # the torch.compile(options=...) key tuner takes for itself
FRESH_INPUT_SETS = 3          # random input sets checked beside the model file's own


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


def split_option(options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """(the precision a compile call opted in to, the options without it) for `torch.compile(...,
    options={"precision": ...})`: Inductor never sees tuner's own key. fp32 when absent."""
    if not options or OPTION not in options:
        return FP32, None if options is None else dict(options)
    rest = {k: v for k, v in options.items() if k != OPTION}
    return get_precision(options[OPTION]).name, rest


def opt_in_hint(name: str) -> str:
    """The one line that tells a user how to opt in to a stored precision."""
    return (f"the stored config uses precision {name}; opt in with options={{'precision': '{name}'}} "
            f"or tuner.compile(model, precision='{name}')")


# -- the accuracy check --------------------------------------------------------------


def relative_error(reference: "torch.Tensor", got: "torch.Tensor") -> float:
    """Norm-wise relative error: max|got - ref| / max(max|ref|, tiny), in float64.

    ±Inf in the reference must be reproduced in place (it is left out of the norm); NaN or Inf
    where the reference is finite is an infinite error; a reference of zeros divides by the
    smallest normal float32, so any difference there is a huge error.
    """
    import torch

    ref, out = reference.detach().cpu().double(), got.detach().cpu().double()
    inf = torch.isinf(ref)
    if bool((out[inf] != ref[inf]).any()) or not bool(torch.isfinite(out[~inf]).all()):
        return float("inf")
    ref, out = ref[~inf], out[~inf]
    if ref.numel() == 0:
        return 0.0
    scale = max(float(ref.abs().max()), torch.finfo(torch.float32).tiny)
    return float((out - ref).abs().max()) / scale


def accuracy_problem(reference: list["torch.Tensor"], got: list["torch.Tensor"]) -> tuple[str | None, float]:
    """(why `got` cannot be compared with `reference`, or None; the largest relative error over
    the floating outputs). Shapes and dtypes must agree and integer outputs must be equal; NaN in
    either (an error that cannot be measured) is a problem, never a pass."""
    import torch

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


# -- applying a mode to one graph -------------------------------------------------------


def compile_with_precision(name: str, gm: Any, example_inputs: Sequence[Any],
                           compile_graph: Callable[[Any], Callable[..., Any]]) -> Callable[..., Any]:
    """`compile_graph(graph)` for Dynamo graph `gm` in precision `name` (see the module docstring):
    the graph gets its casts, the compile runs inside the mode's context, and for a matmul
    precision every call does too. fp32 compiles `gm` as it is."""
    mode = get_precision(name)
    if mode.name == FP32:
        return compile_graph(gm)
    device_type = _device_type(example_inputs)
    graph = _with_casts(gm, example_inputs, mode)
    with _context(mode, device_type):
        compiled = compile_graph(graph)
    if mode.matmul is None:
        return compiled

    def call(*args: Any) -> Any:
        with _context(mode, device_type):
            return compiled(*args)

    return call


@contextlib.contextmanager
def _context(mode: Precision, device_type: str) -> Iterator[None]:
    import torch

    if mode.autocast is not None:
        with torch.autocast(device_type, getattr(torch, mode.autocast)):
            yield
    elif mode.matmul is not None:
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(mode.matmul)
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)
    else:
        yield


def _device_type(example_inputs: Sequence[Any]) -> str:
    import torch

    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.device.type
    return "cpu"


def _with_casts(gm: Any, example_inputs: Sequence[Any], mode: Precision) -> Any:
    """A copy of `gm` whose float32 inputs are cast to `mode.cast_inputs` (inputs the graph
    updates in place keep their dtype, so the update reaches the real tensor) and whose
    floating outputs are cast back to the dtype Dynamo traced them with."""
    import torch
    import torch.fx

    graph = torch.fx.Graph()
    env: dict[Any, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in gm.graph.nodes:
        if node.op == "output":
            graph.output(torch.fx.node.map_arg(node.args[0], lambda n: _cast_back(graph, n, env[n])))
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
        if node.op == "placeholder" and mode.cast_inputs is not None:
            value = example_inputs[placeholders.index(node)] if len(placeholders) == len(example_inputs) else None
            if (isinstance(value, torch.Tensor) and value.dtype == torch.float32 and not _mutated(node)):
                env[node] = graph.call_method("to", (env[node], getattr(torch, mode.cast_inputs)))
    return torch.fx.GraphModule(gm, graph)


def _cast_back(graph: Any, node: Any, new: Any) -> Any:
    import torch

    traced = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(traced, torch.Tensor) and traced.is_floating_point():
        return graph.call_method("to", (new, traced.dtype))
    return new


def _mutated(node: Any) -> bool:
    """Whether the graph updates this input in place (an in-place method or function on it)."""
    import operator

    for user in node.users:
        name = user.target if isinstance(user.target, str) else getattr(user.target, "__name__", "")
        if user.target in (operator.setitem, operator.iadd, operator.imul, operator.isub, operator.itruediv):
            return True
        if name.endswith("_") and not name.endswith("__") and user.args and user.args[0] is node:
            return True
    return False
