"""Platform keys: the hardware plus the software a config was measured on.

`current_platform` describes this process's machine (cached, because the compile-time
backend asks at every lookup); `platform_from_parts` rebuilds a `Platform` from stored
rows or from what another Ray node reported. Both compute keys the same way: the value
and the key formula live in `tuner.keys` (a leaf module storage can import) and are
re-exported here.
"""
from __future__ import annotations

import os
import platform as _pyplatform

from tuner.errors import UsageError
from tuner.keys import Platform, platform_from_parts
from tuner.version import __version__

__all__ = ["Platform", "current_platform", "platform_from_parts"]


_cache: dict[tuple[str, int | None], Platform] = {}


def current_platform(device: str = "cpu", *, threads: int | None = None) -> Platform:
    """This machine's platform for `device` ("cpu", "cuda" or "cuda:N").

    CPU platforms include the thread count (`threads`, default `torch.get_num_threads()`
    at the time of the call), because compiled CPU kernels bake it in. CUDA platforms
    describe the GPU and ignore `threads`. Cached per (device, threads) for the process:
    the first call costs about half a second (Inductor probes the vector ISA), later calls
    are a dictionary lookup. Raises UsageError for a device this machine lacks.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        cache_key: tuple[str, int | None] = ("cpu", threads if threads is not None else torch.get_num_threads())
    elif dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"device {device!r} asked for but no CUDA device is available; use --device cpu")
        cache_key = (f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}", None)
    else:
        raise UsageError(f"unsupported device {device!r}; choose cpu or cuda")
    found = _cache.get(cache_key)
    if found is None:
        name, n_threads = cache_key
        hardware = _cpu_hardware(n_threads) if dev.type == "cpu" else _cuda_hardware(name)
        found = _cache[cache_key] = platform_from_parts(dev.type, hardware, _software())
    return found


def _cpu_hardware(threads: int | None) -> dict[str, str]:
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()  # an InvalidVecISA is falsy
    return {
        "cpu_model": _cpu_model(),
        "vec_isa": str(isa) if isa else "",
        "cores": str(os.cpu_count() or 0),
        "threads": str(threads),
        "machine": _pyplatform.machine(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall back below
    return _pyplatform.processor() or _pyplatform.machine() or "unknown"


def _cuda_hardware(device: str) -> dict[str, str]:
    """The GPU's identity. SM count and memory tell MIG slices apart from whole GPUs."""
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    hw = {
        "gpu_name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": str(props.multi_processor_count),
        "memory_gb": str(round(props.total_memory / 2**30)),
    }
    l2 = getattr(props, "L2_cache_size", 0)
    if l2:
        hw["l2_cache_mb"] = str(round(l2 / 2**20))
    return hw


def _software() -> dict[str, str]:
    import torch

    sw = {
        "python": _pyplatform.python_version(),
        "torch": torch.__version__,
        "triton": _dist_version("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"),
        "cuda": torch.version.cuda or "none",
        "tuner": __version__,
    }
    if getattr(torch.version, "hip", None):
        sw["hip"] = torch.version.hip
    return sw


def _dist_version(*names: str) -> str:
    """An installed distribution's version without importing it (triton's import is slow)."""
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "none"
