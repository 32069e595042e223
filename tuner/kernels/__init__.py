"""Kernel tile configs: `tuner.autotune` kernels, and the kernel database they share with Inductor's hooks.

`autotune` decorates a `@triton.jit` kernel (`AutotunedKernel`): at its first launch per key it
reads the database (`KernelDatabase`, one `KernelWarning` per process when that fails), launches a
stored config at once, or searches the space, stores the winner and launches it (`KernelChoice`
says which). `discover_kernels` points every kernel at a search's database and logs the keys
launched, for `tuner search`; `untuned_launches` runs kernels untuned (the gate's float64
reference). Triton loads only when a kernel is decorated or timed (`AutotunedKernel`, a
subclass of Triton's `Autotuner`, loads with it).
"""
from typing import TYPE_CHECKING, Any

from tuner.kernels.autotuner import autotune
from tuner.kernels.discovery import KernelLaunch, describe_launch, discover_kernels
from tuner.kernels.guarded_db import KernelDatabase, KernelWarning, search_database, warn_once
from tuner.kernels.options import untuned_launches
from tuner.kernels.search import KernelChoice

__all__ = [
    "AutotunedKernel",
    "KernelChoice",
    "KernelDatabase",
    "KernelLaunch",
    "KernelWarning",
    "autotune",
    "describe_launch",
    "discover_kernels",
    "search_database",
    "untuned_launches",
    "warn_once",
]

if TYPE_CHECKING:
    from tuner.kernels.tuned import AutotunedKernel


def __getattr__(name: str) -> Any:
    if name == "AutotunedKernel":     # a subclass of Triton's Autotuner: Triton loads with it
        from tuner.kernels.tuned import AutotunedKernel

        return AutotunedKernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
