"""Runtime knobs: settings of the process a model runs in, searched and stored beside its compile config.

The same compiled model runs at another speed under another allocator or OpenMP policy: the default
compile of examples/resnet.py takes about 14 ms a call in a fresh process and about 10.5 ms with
glibc's malloc told to keep freed memory (docs/measurement.md). These knobs are part of a verdict
like the Inductor ones: measured, stored, validated, ablated, and applied where the user runs
(`tuner run`, `tuner best --emit`, the backend for what a running process can still set).

Each knob is named `runtime.<name>` and takes one of a fixed list of values, never a path or free
text: a stored row names an allocator, and `tuner.runtime.allocators` resolves that name to the
system's own library. A value sets some of:
- `env`: variables a process must start with (read once, when the C library, OpenMP or CUDA's
  allocator loads);
- `preload`: an allocator library loaded before every other (LD_PRELOAD), by name;
- `mallopt`: glibc's malloc parameters, which a running process can still change.

Standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

__all__ = ["ALLOCATOR", "CUDA_ALLOC_CONF", "DEFAULT", "KNOBS", "OMP_PROC_BIND", "OMP_WAIT_POLICY", "PREFIX",
           "RuntimeKnob", "RuntimeValue", "M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD", "RETAIN_BYTES"]

PREFIX = "runtime."
DEFAULT = "default"           # every runtime knob's default: the process as it starts without tuner
ALLOCATOR = "runtime.allocator"
OMP_WAIT_POLICY = "runtime.omp_wait_policy"
OMP_PROC_BIND = "runtime.omp_proc_bind"
CUDA_ALLOC_CONF = "runtime.cuda_alloc_conf"

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# "Keep freed memory": no block below 1 GiB is served by mmap, and the heap is never trimmed below it.
# glibc's own defaults serve every block from 128 KiB with mmap and give it back on free, unless its
# dynamic threshold has moved (`tuner.runtime.allocators.pin_defaults`).
RETAIN_BYTES = 1 << 30


@dataclass(frozen=True)
class RuntimeValue:
    """What one value of a runtime knob sets (nothing: the knob's default)."""

    env: tuple[tuple[str, str], ...] = ()
    preload: str | None = None                         # an allocator name of `allocators.LIBRARIES`
    mallopt: tuple[tuple[int, int], ...] = ()          # (parameter, value) pairs for glibc's mallopt
    description: str = ""

    @property
    def needs_start(self) -> bool:
        """Whether it takes effect only in a process started with it (environment or preload)."""
        return bool(self.env or self.preload)


@dataclass(frozen=True)
class RuntimeKnob:
    """A runtime knob: its values by name (DEFAULT among them, setting nothing) on `device`."""

    name: str
    device: str                     # "cpu" or "cuda": the platforms it applies to
    values: Mapping[str, RuntimeValue] = field(default_factory=dict)
    description: str = ""

    def value(self, name: str) -> RuntimeValue:
        """The value called `name`; KeyError when the knob has none of that name."""
        return self.values[name]


def _knob(name: str, device: str, description: str, **values: RuntimeValue) -> RuntimeKnob:
    return RuntimeKnob(name, device, MappingProxyType({DEFAULT: RuntimeValue(description="as the process starts"),
                                                      **{k.replace("_", "-"): v for k, v in values.items()}}),
                       description)


_RETAIN = (("MALLOC_MMAP_THRESHOLD_", str(RETAIN_BYTES)), ("MALLOC_TRIM_THRESHOLD_", str(RETAIN_BYTES)))

# The registry, by name. The search tries each value that can run here (`tuner.runtime.available`).
KNOBS: Mapping[str, RuntimeKnob] = MappingProxyType({
    ALLOCATOR: _knob(
        ALLOCATOR, "cpu", "the memory allocator behind torch's CPU tensors",
        glibc_retain=RuntimeValue(env=_RETAIN, mallopt=((M_MMAP_THRESHOLD, RETAIN_BYTES),
                                                        (M_TRIM_THRESHOLD, RETAIN_BYTES)),
                                  description="glibc's malloc keeping freed memory for reuse (no mmap, no trim "
                                              "below 1 GiB)"),
        jemalloc=RuntimeValue(preload="jemalloc", description="jemalloc, preloaded (Debian: libjemalloc2)"),
        tcmalloc=RuntimeValue(preload="tcmalloc", description="TCMalloc, preloaded (Debian: libtcmalloc-minimal4)")),
    OMP_WAIT_POLICY: _knob(
        OMP_WAIT_POLICY, "cpu", "what OpenMP's idle threads do between parallel regions",
        passive=RuntimeValue(env=(("OMP_WAIT_POLICY", "PASSIVE"),), description="sleep at once"),
        active=RuntimeValue(env=(("OMP_WAIT_POLICY", "ACTIVE"),), description="spin")),
    OMP_PROC_BIND: _knob(
        OMP_PROC_BIND, "cpu", "whether OpenMP binds its threads to cores",
        close=RuntimeValue(env=(("OMP_PROC_BIND", "close"), ("OMP_PLACES", "cores")),
                           description="one thread per core, on neighbouring cores"),
        spread=RuntimeValue(env=(("OMP_PROC_BIND", "spread"), ("OMP_PLACES", "cores")),
                            description="one thread per core, spread over the cores")),
    CUDA_ALLOC_CONF: _knob(
        CUDA_ALLOC_CONF, "cuda", "options of torch's CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF)",
        expandable_segments=RuntimeValue(env=(("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),),
                                         description="segments that grow in place"),
        roundup_power2=RuntimeValue(env=(("PYTORCH_CUDA_ALLOC_CONF", "roundup_power2_divisions:4"),),
                                    description="sizes rounded to 4 divisions per power of two"),
        max_split_512=RuntimeValue(env=(("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512"),),
                                   description="blocks over 512 MB never split")),
})
