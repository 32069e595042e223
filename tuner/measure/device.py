"""The device a trial measures on: selecting it, waiting for it, the calls checked on it and
the candidate's own memory.

Every CUDA call names the model file's device (`DEVICE = "cuda:1"`), through
`tuner.trial.CudaApi`, and `select` makes it the current device of the trial or confirmation
process, so what Inductor and cudagraphs allocate lands there too.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from tuner.trial import CudaApi, torch_cuda

__all__ = ["allocated_bytes", "call_peak_mb", "checked_calls", "device_sync", "select"]


def _api(device: str, api: CudaApi | None) -> CudaApi | None:
    if not device.startswith("cuda"):
        return None
    return api if api is not None else torch_cuda()


def select(device: str, api: CudaApi | None = None) -> None:
    """Make `device` this process's current CUDA device (nothing on CPU)."""
    cuda = _api(device, api)
    if cuda is not None:
        cuda.set_device(device)


def device_sync(device: str, api: CudaApi | None = None) -> Callable[[], None]:
    """A function that waits for `device` (a no-op on CPU)."""
    cuda = _api(device, api)
    if cuda is None:
        return lambda: None
    return lambda: cuda.synchronize(device)


def checked_calls(call: Callable[[], list[Any]], sync: Callable[[], None], count: int) -> tuple[list[list[Any]], float]:
    """`count` calls, each waited for on its device and its tensors cloned before the next call
    starts; (their outputs, seconds from the first call's start to the last one's end).

    The wait is what makes an asynchronous CUDA error (an illegal address, a device-side assert)
    raise here, inside the caller's boundary, against the config that launched it, rather than
    in whatever runs next. The clone is what keeps a cudagraph replay's output, which the next
    replay overwrites in place, as the call returned it.
    """
    outputs = []
    start = time.perf_counter()
    for _ in range(count):
        got = call()
        sync()
        outputs.append([t.clone() if hasattr(t, "clone") else t for t in got])
    return outputs, time.perf_counter() - start


def allocated_bytes(device: str, api: CudaApi | None = None) -> int:
    """What is allocated on CUDA `device` now (0 on CPU)."""
    cuda = _api(device, api)
    return 0 if cuda is None else cuda.memory_allocated(device)


def call_peak_mb(call: Callable[[], Any], device: str, *, resident_since: int = 0,
                 api: CudaApi | None = None) -> float | None:
    """The candidate's own memory in MiB, whatever else the process holds (the baseline, the
    flush buffer): on CUDA, what it keeps allocated since `resident_since` (allocated bytes read
    before it was loaded: weights, frozen constants, cudagraph pools) plus what one `call` adds
    at its peak (the peak stats reset before it). On CPU, what one call adds to the resident set
    at its peak (VmHWM reset through /proc/self/clear_refs, less VmRSS before): the compiler's
    heap would drown the weights there. None where /proc cannot say."""
    cuda = _api(device, api)
    if cuda is not None:
        cuda.synchronize(device)
        now = cuda.memory_allocated(device)
        cuda.reset_peak_memory_stats(device)
        call()
        cuda.synchronize(device)
        return (max(0, now - resident_since) + cuda.max_memory_allocated(device) - now) / 2**20
    try:
        Path("/proc/self/clear_refs").write_text("5")       # 5: reset the peak RSS to the current RSS
        before = _status_kib("VmRSS")
        call()
        return max(0, _status_kib("VmHWM") - before) / 1024.0
    except OSError:
        return None


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")
