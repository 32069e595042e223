"""What a reported compile time means: a config's own compile, in a process whose compiler is warm.

The first compile of a process pays for the compiler once: Dynamo's and Inductor's lazy imports,
the pattern matcher's set-up, the C++ or Triton toolchain's first use. Measured here (2 cores,
Inductor's caches warm): 5-7 s, against 0.2-1 s for the compile of a small model that follows.
Whichever config a process compiled first would carry it: the default compile of a trial (so its
candidate looked cheap), the defaults' own trial, the first variant of a confirmation (in its
shuffled order). So before its first measured compile a process compiles a probe, a tiny graph
through Inductor's whole pipeline (its FX graph cache off, so it is never a cache hit that skips
lowering), on the model's device, once. Every `compile_s` is then the config's own compile, the
same way for every config and process. A user's own process pays that one-time cost once more,
with its first compile whatever the config (`docs/measurement.md`).
"""
from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["fx_cache_counts", "served_from_cache", "warm_compiler"]

_warmed: dict[str, float] = {}      # device -> seconds the probe took in this process


def _probe(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w + 1)


def warm_compiler(loaded: Any) -> float:
    """Compile and run the probe where the model file's model `loaded` runs (the device of its
    first tensor: where Inductor will generate code for it) the first time this process asks
    (then 0.0): seconds spent. The caller holds the device's compile lock."""
    tensors = [*loaded.args, *loaded.kwargs.values(), *loaded.model.parameters()]
    device = str(next((t.device for t in tensors if isinstance(t, torch.Tensor)), loaded.device))
    if device in _warmed:
        return 0.0
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        return compile_fx(gm, example_inputs, config_patches={"fx_graph_cache": False})

    from tuner.measure.device import device_sync

    start = time.perf_counter()
    x, w = torch.ones(2, 8, device=device), torch.ones(8, 8, device=device)
    with torch.no_grad():
        torch.compile(_probe, backend=backend, dynamic=False)(x, w)
    device_sync(device)()
    _warmed[device] = time.perf_counter() - start
    return _warmed[device]


def fx_cache_counts() -> tuple[int, int]:
    """Inductor's FX graph cache (hits, misses) in this process so far."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def served_from_cache(before: tuple[int, int], after: tuple[int, int]) -> bool | None:
    """Whether the compiles between two `fx_cache_counts` were all cache hits: True, any miss: False,
    no lookup at all (eager, a bypass): None."""
    hits, misses = after[0] - before[0], after[1] - before[1]
    return False if misses else True if hits else None
