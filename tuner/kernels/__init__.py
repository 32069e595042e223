"""Kernel tile configs: `tuner.autotune` kernels, and the kernel database they share with Inductor's hooks.

`autotune` decorates a `@triton.jit` kernel (`AutotunedKernel`): at its first launch per key it
reads the database (`KernelDatabase`, one `KernelWarning` per process when that fails), launches a
stored config at once, or searches the space, stores the winner and launches it (`KernelChoice`
says which). `discover_kernels` points every kernel at a search's database and logs the keys
launched, for `tuner search`; `untuned_launches` runs kernels untuned (the gate's float64
reference). Triton loads only when a kernel is decorated or timed.
"""
from tuner.kernels.autotuner import AutotunedKernel, autotune, untuned_launches
from tuner.kernels.database import KernelDatabase, KernelWarning, search_database, warn_once
from tuner.kernels.discovery import KernelLaunch, describe_launch, discover_kernels
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
