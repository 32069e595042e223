"""Applying a precision mode (`tuner.precision`) to one Dynamo graph, inside the one compile.

`compiler.make_backend` calls `compile_with_precision` per graph, so a trial measures exactly what
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
program around a graph sees the dtypes it would see without tuner. This module imports torch
only inside functions, as the rest of `tuner.inductor` does.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

from tuner.precision import FP32, Precision, get_precision


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
