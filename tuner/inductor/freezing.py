"""Freezing inside a backend: a graph's parameters and buffers bound as constants, in one trace.

Inductor's freezing folds a graph's weights into the compiled code (constant folding, conv/BN
fusion, prepacked mkldnn weights on CPU), but only for weights the graph holds as attributes
(`get_attr`). Dynamo makes them attributes only under `prepare_freezing`, decided before any
backend runs. With `inline_inbuilt_nn_modules` (the default since torch 2.5) Dynamo instead
hands the backend a module's parameters and buffers as graph inputs, and each placeholder
carries its source (`node.meta["grapharg"].source`, a chain through an
`UnspecializedParamBufferSource`). `freeze_inputs` makes the substitution Dynamo's
`prepare_freezing` makes (`make_graph_attribute` in `torch/_dynamo/variables/builder.py`):
each such placeholder becomes a `get_attr` of the tensor itself, and the graph keeps the
other inputs. Compiled with Inductor's `freezing` patch and grad disabled, that is Inductor's
own freezing.

Safety, as Inductor's freezing promises it and no weaker (`FrozenGraph`): the frozen code is
used only with grad disabled and only while every bound tensor is the same object with the
same storage and the same version counter (`load_state_dict`, an optimizer step or any
in-place change under `no_grad` bumps it). Otherwise the graph is frozen again with the new
values, at most `MAX_REFREEZES` times; after that, and for any call with grad enabled, it runs
the thawed compile (the config without freezing, compiled on first need). Never stale weights.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["MAX_REFREEZES", "FrozenGraph", "freeze_inputs", "static_inputs"]

log = logging.getLogger("tuner.lookup")

MAX_REFREEZES = 2       # weights that keep changing are trained, not frozen: stop recompiling


def static_inputs(gm: Any) -> list[int]:
    """Positions of the placeholders of `gm` that Dynamo lifted from a module's parameters or
    buffers (their source passes through an `UnspecializedParamBufferSource`)."""
    from torch._dynamo.source import UnspecializedParamBufferSource

    found = []
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for position, node in enumerate(placeholders):
        source = getattr(node.meta.get("grapharg"), "source", None)
        while source is not None:
            if isinstance(source, UnspecializedParamBufferSource):
                found.append(position)
                break
            source = getattr(source, "base", None)
    return found


def freeze_inputs(gm: Any, inputs: Sequence[Any], positions: Sequence[int]) -> Any:
    """A copy of `gm` whose placeholders at `positions` are `get_attr`s of `inputs[position]`
    (the tensor itself, not a copy: Inductor's freezing reads it at compile time). The copy takes
    the other inputs, in their order."""
    import copy

    import torch

    frozen = copy.copy(gm)              # shares submodules; a graph of its own below
    frozen.graph = copy.deepcopy(gm.graph)
    frozen.graph.owning_module = frozen
    placeholders = [node for node in frozen.graph.nodes if node.op == "placeholder"]
    last = placeholders[-1] if placeholders else None
    for n, position in enumerate(positions):
        node, tensor = placeholders[position], inputs[position]
        name = f"_tuner_frozen_{n}"
        if isinstance(tensor, torch.nn.Parameter):
            frozen.register_parameter(name, tensor)
        else:
            frozen.register_buffer(name, tensor)
        with frozen.graph.inserting_after(last):
            attr = frozen.graph.get_attr(name)
        attr.meta = dict(node.meta)
        node.replace_all_uses_with(attr)
        frozen.graph.erase_node(node)
    frozen.graph.lint()
    frozen.recompile()
    return frozen


@dataclass(frozen=True)
class _Bound:
    """What a frozen compile assumed about one bound tensor."""

    tensor: Any
    data_ptr: int
    version: int

    @classmethod
    def of(cls, tensor: Any) -> "_Bound":
        return cls(tensor, tensor.data_ptr(), tensor._version)

    def holds(self, tensor: Any) -> bool:
        return tensor is self.tensor and tensor.data_ptr() == self.data_ptr and tensor._version == self.version


class FrozenGraph:
    """The compiled callable of a graph frozen in the backend. Dynamo calls it with every input,
    the bound ones included; see the module docstring for when it runs frozen.

    `compile_frozen(gm, inputs)` compiles a frozen copy (freezing patch on), `thaw()` returns
    the compiled graph without freezing (called at most once, on first need).
    """

    def __init__(self, gm: Any, inputs: Sequence[Any], positions: Sequence[int],
                 compile_frozen: Callable[[Any, list[Any]], Callable], thaw: Callable[[], Callable],
                 *, what: str = "graph") -> None:
        self._gm, self._positions = gm, tuple(positions)
        bound = set(self._positions)
        self._rest = tuple(i for i in range(len(inputs)) if i not in bound)   # the inputs the frozen code takes
        self._compile_frozen, self._thaw = compile_frozen, thaw
        self._what = what
        self._lock = threading.Lock()
        self._thawed: Callable | None = None
        self.refreezes = 0              # for the log line
        self._freeze(inputs)

    def _freeze(self, inputs: Sequence[Any]) -> None:
        rest = [inputs[i] for i in self._rest]
        self._bound = tuple(_Bound.of(inputs[i]) for i in self._positions)
        self._frozen = self._compile_frozen(freeze_inputs(self._gm, inputs, self._positions), rest)

    def _holds(self, args: Sequence[Any]) -> bool:
        return all(bound.holds(args[i]) for bound, i in zip(self._bound, self._positions))

    def thawed(self) -> Callable:
        with self._lock:
            if self._thawed is None:
                self._thawed = self._thaw()
            return self._thawed

    def __call__(self, *args: Any) -> Any:
        import torch

        if torch.is_grad_enabled() or self._frozen is None:
            return self.thawed()(*args)
        if not self._holds(args):
            with self._lock:
                if not self._holds(args):
                    self._refreeze(args)
            if self._frozen is None:
                return self.thawed()(*args)
        return self._frozen(*[args[i] for i in self._rest])

    def _refreeze(self, args: Sequence[Any]) -> None:
        """The weights changed since the frozen compile: freeze again with the new values, or
        after MAX_REFREEZES (or a compile that fails) keep the thawed compile from now on."""
        if self.refreezes >= MAX_REFREEZES:
            log.info("tuner: %s: its weights changed again after %d re-freezes; running it without "
                     "freezing from now on", self._what, self.refreezes)
            self._frozen = None
            return
        self.refreezes += 1
        log.info("tuner: %s: its weights changed since it was frozen; freezing it again", self._what)
        try:
            self._freeze(args)
        except Exception as exc:  # noqa: BLE001 - a failed re-freeze must not break the user's call
            log.warning("tuner: %s: freezing again failed (%s: %s); running it without freezing",
                        self._what, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            self._frozen = None
