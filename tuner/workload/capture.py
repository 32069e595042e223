"""Workloads: the Dynamo graphs a model compiles to, and their structural fingerprints.

`capture_workload` runs a model file's model once under `torch.compile` with a backend
that only records, and returns one `GraphFingerprint` per Dynamo graph.
`fingerprint_graph` is the single definition of the workload key: the search calls it
through `capture_workload`, and the compile-time backend calls it directly with the
`(gm, example_inputs)` Dynamo hands it. Both see the same graph, so both get the same key.
The values (`GraphFingerprint`, `Workload`) and the hash formulas live in `tuner.keys`
and are re-exported here.
"""
from __future__ import annotations

import enum
import re
import sys
from typing import TYPE_CHECKING, Any, Callable

from tuner.errors import ModelFileError
from tuner.keys import GraphFingerprint, Workload, canonical_json, graph_key, workload_key

if TYPE_CHECKING:
    import torch
    import torch.fx

    from tuner.workload.modelfile import LoadedModel

__all__ = ["FINGERPRINT_VERSION", "GraphFingerprint", "Workload", "capture_workload", "fingerprint_graph"]

# Bump when the canonical text changes shape, so old keys stop matching instead of
# matching something they were not measured on.
FINGERPRINT_VERSION = 1

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SYMBOL_PREFIX = re.compile(r"[A-Za-z_]+")


def fingerprint_graph(gm: "torch.fx.GraphModule", example_inputs: list, *, index: int = 0) -> GraphFingerprint:
    """Fingerprint one Dynamo graph with the inputs Dynamo passes to a backend.

    Called by `capture_workload` and, at compile time, from inside the tuner backend.
    Pure: it adds no guards (it never calls `int()`/`bool()` on a SymInt or compares
    one), does not run the graph and does not change global state.

    The key covers, for each node in order: its op, a canonical target, its arguments
    (nodes as indices, constants canonicalised) and the shape, stride, storage offset,
    dtype, device type and requires_grad of its example value; placeholders whose
    example input is an `nn.Parameter` are marked. Symbolic sizes are renamed s0, s1, ...
    in order of first appearance. Grad mode and autocast state at the call are included.
    Node names, attribute names, parameter values, file paths, the torch version and
    Inductor's config are not.
    """
    canon = _Canonicaliser(gm)
    lines: list[str] = []
    input_meta: list[dict[str, Any]] = []
    for i, node in enumerate(gm.graph.nodes):
        example = None
        if node.op == "placeholder":
            pos = len(input_meta)
            example = example_inputs[pos] if pos < len(example_inputs) else None
        line, meta = canon.node_line(i, node, example)
        lines.append(line)
        if node.op == "placeholder":
            input_meta.append(meta)
    header = f"tuner-fingerprint v{FINGERPRINT_VERSION}; {_global_state(canon.device_types)}"
    code = "\n".join([header, *lines])
    return GraphFingerprint(
        key=graph_key(code),
        index=index,
        num_nodes=len(gm.graph.nodes),
        input_meta=canonical_json(input_meta),
        code=code,
    )


def capture_workload(loaded: "LoadedModel", *, name: str | None = None, grad: bool = False,
                     dynamic: bool | None = None, call: Callable[[Callable], Any] | None = None) -> Workload:
    """Capture the Dynamo graphs of `loaded` on its inputs and fingerprint each one.

    Resets Dynamo, compiles the model with a backend that records
    `fingerprint_graph(gm, example_inputs, index=i)` and runs the graph as is (nothing
    reaches Inductor), calls it once under `torch.no_grad()` (or `enable_grad()` when
    `grad`), and resets Dynamo again. `dynamic` is passed to `torch.compile`. `call` runs the
    compiled model (default `loaded.call`; train mode passes `tuner.workload.loss_call`, so the
    graphs are those of a training step: grad on, parameters requiring grad).
    Raises ModelFileError when Dynamo cannot trace the model or produces no graph.
    """
    import torch

    graphs: list[GraphFingerprint] = []
    own_errors: list[BaseException] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        try:
            graphs.append(fingerprint_graph(gm, example_inputs, index=len(graphs)))
        except BaseException as exc:
            own_errors.append(exc)
            raise
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = torch.compile(loaded.model, backend=record, dynamic=dynamic)
        with torch.enable_grad() if grad else torch.no_grad():
            (call or loaded.call)(compiled)
    except Exception as exc:  # noqa: BLE001 - the model's problem, turned into one actionable line
        if own_errors:  # a bug in fingerprint_graph is ours, not the user's: surface it as is
            raise own_errors[0] from None
        raise ModelFileError(
            f"torch.compile could not capture {loaded.path}: {_dynamo_error_line(exc)}; "
            f"check that the model runs in eager mode, then rerun with TORCH_LOGS=graph_breaks,dynamo to see why"
        ) from exc
    finally:
        torch._dynamo.reset()
    if not graphs:
        raise ModelFileError(
            f"torch.compile captured no graph from {loaded.path}; make forward() run tensor operations "
            f"that Dynamo can trace (TORCH_LOGS=graph_breaks shows what it skipped)"
        )
    return Workload(
        key=workload_key(g.key for g in graphs),
        name=name if name is not None else loaded.path.stem,
        graphs=tuple(graphs),
    )


def _dynamo_error_line(exc: BaseException) -> str:
    """One line for a Dynamo error: its headline and explanation (its last line is boilerplate)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__qualname__
    explanation = next((ln for ln in lines if ln.startswith("Explanation:")), None)
    text = f"{type(exc).__qualname__}: {lines[0]}"
    return f"{text} ({explanation})" if explanation else text


def _requires_grad(t: "torch.Tensor") -> bool:
    """requires_grad, counted only when grad mode is on: under no_grad or inference_mode it
    changes nothing that is compiled, so `model.requires_grad_(False)` keeps the same key."""
    import torch

    return bool(t.requires_grad) and torch.is_grad_enabled()


def _global_state(device_types: set[str]) -> str:
    """The global state that changes what the backend compiles (read, never set)."""
    import torch

    parts = [f"grad={int(torch.is_grad_enabled())}"]
    for dev in sorted(device_types or {"cpu"}):
        try:
            enabled = torch.is_autocast_enabled(dev)
        except RuntimeError:  # a device type autocast does not know: it cannot be on
            continue
        dtype = str(torch.get_autocast_dtype(dev)).removeprefix("torch.") if enabled else "off"
        parts.append(f"autocast[{dev}]={dtype}")
    return " ".join(parts)


def _target_name(target: Any) -> str:
    """A name for a callable that is stable across processes and model-file locations."""
    import torch

    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"ops.{target}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"ops.higher_order.{target.name()}"
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if qualname is not None and "<locals>" in qualname:
        # Closures share a qualname (F.max_pool1d and F.max_pool2d are both
        # `boolean_dispatch.<locals>.fn`); their __name__ tells them apart.
        qualname = getattr(target, "__name__", qualname)
    if qualname is None:
        return f"<{type(target).__module__}.{type(target).__qualname__}>"
    module = getattr(target, "__module__", None) or ""
    top = module.split(".")[0]
    # Code from a model file or a user package has a module name that depends on how it
    # was imported (by path at capture, as a package at compile time): keep only torch's
    # and the standard library's module names.
    if top in ("torch", "builtins") or top in sys.stdlib_module_names:
        return f"{module}.{qualname}"
    return f"<user>.{qualname}"


class _Canonicaliser:
    """Turns one graph's nodes into canonical text, renaming symbols as it meets them."""

    def __init__(self, gm: "torch.fx.GraphModule") -> None:
        self.gm = gm
        self.symbols: dict[Any, Any] = {}          # Dynamo's sympy symbol -> canonical symbol
        self.prefix_counts: dict[str, int] = {}
        self.device_types: set[str] = set()
        self.node_index: dict[Any, int] = {}

    # -- nodes ---------------------------------------------------------------
    def node_line(self, i: int, node: Any, example: Any) -> tuple[str, dict[str, Any]]:
        import torch

        self.node_index[node] = i
        value = node.meta.get("example_value", node.meta.get("val"))
        if value is None and node.op == "placeholder":
            value = example
        if node.op == "placeholder":
            target = ""
        elif node.op == "call_function":
            target = _target_name(node.target)
        elif node.op == "call_method":
            target = str(node.target)
        elif node.op == "call_module":
            target = self.module_sig(self.gm.get_submodule(node.target))
        elif node.op == "get_attr":
            target = self.attr_sig(self._resolve_attr(node.target))
        else:  # output
            target = ""
        line = f"%{i} = {node.op} {target}({', '.join(self.value(a) for a in node.args)})"
        if node.kwargs:
            line += " " + self.value(dict(node.kwargs))
        if node.op != "output":
            line += " :: " + self.value(value)
        meta: dict[str, Any] = {}
        if node.op == "placeholder":
            meta = self.value_meta(value)
            # Parameters are static inputs (freezing, cudagraphs); a tensor argument is not.
            if isinstance(example, torch.nn.Parameter):
                line += " param"
                meta["param"] = True
        return line, meta

    def _resolve_attr(self, target: str) -> Any:
        obj: Any = self.gm
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    def attr_sig(self, obj: Any) -> str:
        import torch

        if isinstance(obj, torch.fx.GraphModule):
            sub = _Canonicaliser(obj)
            sub.symbols, sub.prefix_counts, sub.device_types = self.symbols, self.prefix_counts, self.device_types
            lines = [sub.node_line(j, n, None)[0] for j, n in enumerate(obj.graph.nodes)]
            return "subgraph{" + "; ".join(lines) + "}"
        if isinstance(obj, torch.nn.Module):
            return self.module_sig(obj)
        return "const " + self.value(obj)

    def module_sig(self, mod: "torch.nn.Module") -> str:
        """Class, config (extra_repr) and parameter/buffer metadata, without attribute names."""
        cls = type(mod)
        tensors = [self.value(t) for t in (*mod.parameters(recurse=False), *mod.buffers(recurse=False))]
        children = [self.module_sig(c) for c in mod.children()]
        name = _target_name(cls)
        return f"{name}({mod.extra_repr()})[{', '.join(tensors + children)}]"

    # -- values --------------------------------------------------------------
    def value(self, v: Any) -> str:
        """Canonical text of an argument or an example value (never a tensor's data)."""
        import torch
        import torch.fx

        if isinstance(v, torch.fx.Node):
            return f"%{self.node_index[v]}"
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.sym(v)
        if v is None or isinstance(v, (bool, int, float, complex, str)):
            return repr(v)
        if v is Ellipsis:
            return "..."
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.device):
            return f"device({v.type})"
        if isinstance(v, (torch.memory_format, torch.layout)):
            return str(v)
        if isinstance(v, slice):
            return f"slice({self.value(v.start)}, {self.value(v.stop)}, {self.value(v.step)})"
        if isinstance(v, dict):
            items = sorted((str(k), self.value(x)) for k, x in v.items())
            return "{" + ", ".join(f"{k}: {x}" for k, x in items) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(self.value(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + ", ".join(self.value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if isinstance(v, enum.Enum):
            return f"{type(v).__qualname__}.{v.name}"
        if callable(v) and hasattr(v, "__qualname__"):
            return _target_name(v)
        text = repr(v)
        if _ADDRESS.search(text):
            return f"<{type(v).__qualname__}>"
        return text

    def value_meta(self, v: Any) -> dict[str, Any]:
        """The JSON form of a placeholder's example value, for `input_meta`."""
        import torch

        if isinstance(v, torch.Tensor):
            meta: dict[str, Any] = {
                "shape": [self.size(s) for s in v.shape],
                "dtype": str(v.dtype).removeprefix("torch."),
                "device": v.device.type,
                "requires_grad": _requires_grad(v),
            }
            if v.layout == torch.strided:
                meta["stride"] = [self.size(s) for s in v.stride()]
            else:
                meta["layout"] = str(v.layout)
            return meta
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return {"sym": self.sym(v)}
        return {"value": self.value(v)}

    def tensor(self, t: "torch.Tensor") -> str:
        import torch

        self.device_types.add(t.device.type)
        shape = ",".join(str(self.size(s)) for s in t.shape)
        parts = [f"[{shape}]"]
        if t.layout == torch.strided:
            parts.append("stride=" + ",".join(str(self.size(s)) for s in t.stride()))
            offset = self.size(t.storage_offset())
            if offset != 0:
                parts.append(f"offset={offset}")
        else:
            parts.append(str(t.layout))
        parts += [str(t.dtype).removeprefix("torch."), t.device.type, f"rg={int(_requires_grad(t))}"]
        kind = type(t).__name__
        if kind not in ("Tensor", "FakeTensor", "Parameter", "FunctionalTensor"):
            parts.append(kind)
        return "T(" + " ".join(parts) + ")"

    def size(self, s: Any) -> int | str:
        """An int stays an int; a SymInt becomes its canonical expression (no guard added)."""
        import torch

        if isinstance(s, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.sym(s)
        return s

    def sym(self, s: Any) -> str:
        expr = s.node.expr
        free = getattr(expr, "free_symbols", set())
        new = [x for x in free if x not in self.symbols]
        if new:
            # Several unseen symbols in one expression: order by their hint, then name.
            # Names are Dynamo's and unstable, but this only breaks ties between equal hints.
            env = getattr(s.node, "shape_env", None)
            var_to_val = getattr(env, "backed_var_to_val", None)  # older torch: var_to_val
            if var_to_val is None:
                var_to_val = getattr(env, "var_to_val", {})
            for x in sorted(new, key=lambda x: (str(var_to_val.get(x, "")), str(x))):
                self.symbols[x] = self._new_symbol(x)
        return str(expr.xreplace(self.symbols)) if free else str(expr)

    def _new_symbol(self, x: Any) -> Any:
        import sympy

        match = _SYMBOL_PREFIX.match(str(x))
        prefix = match.group(0) if match else "s"
        n = self.prefix_counts.get(prefix, 0)
        self.prefix_counts[prefix] = n + 1
        return sympy.Symbol(f"{prefix}{n}", **x.assumptions0)
