"""Platform keys: the hardware plus the software a config was measured on.

`current_platform` describes this process's machine (cached, because the compile-time
backend asks at every lookup); `platform_from_parts` rebuilds a `Platform` from stored
rows or from what another Ray node reported. Both compute keys the same way.
"""
from __future__ import annotations

import hashlib
import os
import platform as _pyplatform
from dataclasses import dataclass
from typing import Any, Mapping

from tuner.errors import UsageError
from tuner.trial import canonical_json


@dataclass(frozen=True)
class Platform:
    key: str               # hash of hardware_key + software_key
    hardware_key: str      # hash of `hardware`
    software_key: str      # hash of `software`
    device: str            # "cpu" or "cuda"
    hardware: tuple[tuple[str, str], ...]   # e.g. (("cpu_model", "AMD EPYC ..."), ("vec_isa", "avx2"), ...)
    software: tuple[tuple[str, str], ...]   # (("python", "3.11.7"), ("torch", "2.13.0+cpu"), ("triton", ...), ...)

    def describe(self) -> str:
        hw = dict(self.hardware)
        name = hw.get("gpu_name") or hw.get("cpu_model", "?")
        sw = dict(self.software)
        return f"{name} ({self.device}), torch {sw.get('torch', '?')}"


_KEY_LEN = 24
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


def platform_from_parts(device: str, hardware: Mapping[str, Any], software: Mapping[str, Any]) -> Platform:
    """Build a Platform (and its keys) from its parts; values are stored as strings.

    Used by `current_platform`, to rebuild stored platforms, and for other Ray nodes.
    The hardware key covers the device type and `hardware`; the software key covers
    `software`; the platform key covers both keys.
    """
    hw = tuple(sorted((str(k), str(v)) for k, v in hardware.items()))
    sw = tuple(sorted((str(k), str(v)) for k, v in software.items()))
    hardware_key = _hash({"device": device, "hardware": dict(hw)})
    software_key = _hash(dict(sw))
    return Platform(
        key=_hash([hardware_key, software_key]),
        hardware_key=hardware_key,
        software_key=software_key,
        device=device,
        hardware=hw,
        software=sw,
    )


def _hash(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:_KEY_LEN]


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

    import tuner

    sw = {
        "python": _pyplatform.python_version(),
        "torch": torch.__version__,
        "triton": _dist_version("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"),
        "cuda": torch.version.cuda or "none",
        "tuner": tuner.__version__,
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
