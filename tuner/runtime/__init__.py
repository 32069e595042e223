"""Runtime knobs: the process a model runs in (allocator, OpenMP policy, CUDA's allocator options).

`tuner.runtime.knobs` is the registry; `RuntimeConfig` applies a config's runtime knobs where a
process starts, where one runs, and where ours time; `tuner.runtime.allocators` resolves an
allocator's name to the system's own library and sets glibc's malloc parameters. Standard library
only: a trial process sets its allocator before torch loads.
"""
from __future__ import annotations

from tuner.runtime.config import RuntimeConfig, runtime_problem
from tuner.runtime.knobs import ALLOCATOR, CUDA_ALLOC_CONF, DEFAULT, KNOBS, OMP_PROC_BIND, OMP_WAIT_POLICY, PREFIX

__all__ = ["ALLOCATOR", "CUDA_ALLOC_CONF", "DEFAULT", "KNOBS", "OMP_PROC_BIND", "OMP_WAIT_POLICY", "PREFIX",
           "RuntimeConfig", "choices_here", "runtime_problem"]


def choices_here(device: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The runtime knob settings a search on `device` can try on this machine, other than the
    defaults, as (knob, value) pairs; and one note for each left out (its library not installed,
    a C library other than glibc)."""
    from tuner.runtime import allocators

    kind = "cuda" if device.startswith("cuda") else "cpu"
    settings, notes = [], []
    for name, knob in KNOBS.items():
        if knob.device != kind:
            continue
        for value, setting in knob.values.items():
            if value == DEFAULT:
                continue
            if setting.preload is not None and not allocators.available(setting.preload):
                notes.append(f"{name}={value} left out: {setting.preload} is not installed ({setting.description})")
            elif setting.mallopt and allocators.glibc() is None:
                notes.append(f"{name}={value} left out: the C library is not glibc")
            else:
                settings.append((name, value))
    return settings, notes
