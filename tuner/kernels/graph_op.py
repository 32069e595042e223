"""A `tuner.autotune` launch inside `torch.compile` where Dynamo cannot trace Triton: one op.

Where Dynamo's Triton support is on (a GPU), Dynamo recognises the kernel as Triton's
`Autotuner` and never calls the kernel's own launcher. Where it is off (CPU, under
`TRITON_INTERPRET=1`), the launcher, traced by Dynamo, packs the launch into one call of the
registered custom operator `tuner::launch_kernel`, so the graph holds it as one opaque op
with every tensor argument declared mutated (the kernel may write any of them; Inductor
copies nothing it does not need to). At run time the op unpacks the launch and runs it as
in eager: the database, the search and the hooks all work as they do outside a compile.

The op's arguments: the kernel's index in this process's registry, the tensor arguments,
the int and float arguments (SymInts under dynamic shapes), the other constants as text,
a layout naming where each parameter went, and the grid evaluated at trace time for each
config (Dynamo does the same for Triton kernels), 3 ints per config.
"""
from __future__ import annotations

import threading
from typing import Any

__all__ = ["kernel_at", "launch_in_graph", "register"]

_kernels: list[Any] = []            # AutotunedKernel by index: the op's first argument
_lock = threading.Lock()
_op: list[Any] = []
SCHEMA = ("(int kernel, Tensor(a!)[] tensors, SymInt[] ints, float[] floats, str[] consts, str layout, "
          "SymInt[] grids) -> ()")


def register(kernel: Any) -> int:
    """Give a kernel its index for the op (and define the op, once per process)."""
    with _lock:
        if not _op:
            _op.append(_define())
        _kernels.append(kernel)
        return len(_kernels) - 1


def kernel_at(index: int) -> Any:
    """The kernel registered under `index`."""
    return _kernels[index]


def _define() -> Any:
    import torch

    # The schema is written out: `from __future__ import annotations` leaves nothing to infer.
    @torch.library.custom_op("tuner::launch_kernel", mutates_args=("tensors",), schema=SCHEMA)
    def launch_kernel(kernel: int, tensors: list[Any], ints: list[int], floats: list[float],
                      consts: list[str], layout: str, grids: list[int]) -> None:
        _launch(_kernels[kernel], tensors, ints, floats, consts, layout, grids)

    @launch_kernel.register_fake
    def _(kernel: int, tensors: list[Any], ints: list[int], floats: list[float],
          consts: list[str], layout: str, grids: list[int]) -> None:
        return None

    return launch_kernel


def launch_in_graph(kernel: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Traced by Dynamo: the launch `kernel[grid](*args, **kwargs)` as one `tuner::launch_kernel`."""
    import torch

    named = dict(zip(kernel.arg_names, args))
    named.update(kwargs)
    tensors: list[Any] = []
    ints: list[Any] = []
    floats: list[Any] = []
    consts: list[str] = []
    tokens = ["positional=" + str(len(args))]
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            tokens.append(name + "=t" + str(len(tensors)))
            tensors.append(value)
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            tokens.append(name + "=c" + str(len(consts)))
            consts.append("none:" if value is None else ("bool:" + str(int(value))) if isinstance(value, bool)
                          else "str:" + value)
        elif isinstance(value, (int, torch.SymInt)):
            tokens.append(name + "=i" + str(len(ints)))
            ints.append(value)
        elif isinstance(value, (float, torch.SymFloat)):
            tokens.append(name + "=f" + str(len(floats)))
            floats.append(value)
        elif isinstance(value, torch.dtype):
            tokens.append(name + "=c" + str(len(consts)))
            consts.append("torch:" + str(value).removeprefix("torch."))
        else:                       # a triton.language dtype (`DTYPE: tl.constexpr`)
            tokens.append(name + "=c" + str(len(consts)))
            consts.append("tl:" + value.name)
    grids: list[Any] = []
    for meta in kernel.grid_metas():
        got = grid({**named, **meta}) if callable(grid) else grid
        got = tuple(got)
        grids.extend(list(got) + [1] * (3 - len(got)))
    torch.ops.tuner.launch_kernel(kernel.graph_index, tensors, ints, floats, consts, ",".join(tokens), grids)


def _const(text: str) -> Any:
    kind, _, value = text.partition(":")
    if kind == "none":
        return None
    if kind == "bool":
        return value == "1"
    if kind == "str":
        return value
    if kind == "torch":
        import torch

        return getattr(torch, value)
    import triton.language as tl

    return tl.dtype(value)


def _launch(kernel: Any, tensors: list[Any], ints: list[int], floats: list[float], consts: list[str],
            layout: str, grids: list[int]) -> None:
    """Run the packed launch as in eager (`kernel.run`), the grid picked by the chosen config."""
    pools = {"t": tensors, "i": ints, "f": floats}
    tokens = layout.split(",")
    positional = int(tokens[0].partition("=")[2])
    named: dict[str, Any] = {}
    for token in tokens[1:]:
        name, _, where = token.partition("=")
        named[name] = _const(consts[int(where[1:])]) if where[0] == "c" else pools[where[0]][int(where[1:])]
    metas = kernel.grid_metas()

    def grid(meta: dict[str, Any]) -> tuple[int, int, int]:
        for index, wanted in enumerate(metas):
            if all(meta.get(k, v) == v for k, v in wanted.items()):
                return tuple(grids[3 * index:3 * index + 3])
        raise TypeError(f"tuner.autotune: {kernel.__name__} launched a config that is not among its "
                        f"configs inside torch.compile; return configs from kernel.configs in early_config_prune")

    names = list(named)
    args = [named[n] for n in names[:positional]]
    kwargs = {n: named[n] for n in names[positional:]}
    kernel.run(*args, grid=grid, warmup=False, **kwargs)
