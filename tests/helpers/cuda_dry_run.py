"""A CUDA machine of two GPUs for one process of this CPU build: the CUDA dry run's stand-in.

A model file (tests/models/dry_run_cuda.py) calls `install()` when it is imported, so every
process that loads it (the `tuner search` driver, each trial and confirmation process, `tuner
compare`, a user's script calling `tuner.compile`) gets the stand-in before the product asks torch
about its device; nothing in the package knows of it. The product's own `TorchCuda` and torch's
own Python functions (`torch.cuda.is_available`, `device_count`, `set_device`, `current_device`,
`synchronize`, `current_stream`, `get_device_properties`, `memory_allocated`,
`reset_peak_memory_stats`, `torch.device(...)` parsing, `_get_device_index`, the lazy init)
all run for real. Stood in are only:

- the C entry points below them that this build lacks (`torch._C._cuda_getDeviceCount`,
  `_cuda_init`, `_cuda_setDevice`, `_cuda_getDevice`, `_cuda_exchangeDevice`,
  `_cuda_synchronize`, `_cuda_getCurrentStream`, `_cuda_memoryStats`,
  `_cuda_resetPeakMemoryStats`, `_cuda_cudaCachingAllocator_is_enabled`) and what `_cuda_init`
  sets up (`torch.cuda.default_generators`, `torch.cuda._get_device_properties`), with the CUDA
  runtime's own refusals: an ordinal the process cannot see is "CUDA error: invalid device
  ordinal", and CUDA_VISIBLE_DEVICES hides and renumbers GPUs as the runtime does (Ray sets it for
  a task given `num_gpus`);
- the objects a CPU build cannot make: `torch.cuda.Stream` and `torch.cuda.Event` (an event is
  stamped with the host's clock when recorded: CPU work is synchronous, so the wall clock is the
  device's), and a tensor's storage on a GPU: `Tensor.to` and `torch.empty` parse their
  arguments with torch's own parser, refuse an ordinal the process cannot see, count the bytes
  on that GPU (its memory stats), and keep the tensor on CPU.

So the product sees its device as "cuda:N" everywhere while its tensors and Inductor's code
stay on CPU. With DRY_RUN_LOG set, each device call appends one line "PID CALL GPU" to that file (CALL: the
entry point's name without `_cuda_`, "to" or "empty" for a placement, "record" for an event),
GPU being the node's GPU (CUDA_VISIBLE_DEVICES undone), so a test can say which process touched
which GPU. DRY_RUN_GPUS sets how many GPUs the machine has (default 2).
"""
from __future__ import annotations

import os
import time
import types
from typing import Any

_state: dict[str, Any] = {}


def visible() -> list[int]:
    """The node's GPUs this process sees, in its own order: CUDA_VISIBLE_DEVICES parsed as the CUDA
    runtime does (up to the first entry that is not a GPU of the node)."""
    gpus = int(os.environ.get("DRY_RUN_GPUS", "2"))
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(range(gpus))
    out: list[int] = []
    for item in listed.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) >= gpus or int(item) in out:
            break
        out.append(int(item))
    return out


def calls() -> list[tuple[str, int]]:
    """This process's device calls so far: (call, the node's GPU), in order."""
    return _state.setdefault("calls", [])


def log(call: str, index: int) -> None:
    gpu = visible()[index]
    calls().append((call, gpu))
    path = os.environ.get("DRY_RUN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {call} {gpu}\n")


def _ordinal(index: int) -> int:
    if not 0 <= index < len(visible()):
        raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                           "reported at some other API call, so the stacktrace below might be incorrect.")
    return index


def _properties(index: int) -> Any:
    gpu = visible()[_ordinal(index)]
    log("properties", index)
    return types.SimpleNamespace(
        name="Dry Run GPU", major=9, minor=0, multi_processor_count=132, total_memory=80 * 2**30,
        L2_cache_size=2**20, uuid=f"dry-run-{gpu}", pci_domain_id=0, pci_bus_id=0x40 + gpu, pci_device_id=0,
        is_integrated=False, is_multi_gpu_board=False, warp_size=32, max_threads_per_multi_processor=2048,
        regs_per_multiprocessor=65536, shared_memory_per_block_optin=232448, gcnArchName="NA")


class Stream:
    """torch.cuda.Stream as torch.cuda.current_stream builds it from `_cuda_getCurrentStream`."""

    def __init__(self, stream_id: int = 0, device_index: int = 0, device_type: int = 1, **_: Any) -> None:
        self.stream_id, self.device_index, self.device_type = stream_id, device_index, device_type


class Event:
    """torch.cuda.Event, stamped with the host's clock when recorded on a stream."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing, self.at = enable_timing, None

    def record(self, stream: Stream | None = None) -> None:
        index = _state["current"] if stream is None else stream.device_index
        log("record", index)
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: Event) -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.at - self.at) * 1000.0


def _gpu(device: Any) -> int | None:
    """The ordinal `device` (parsed by torch) names on a GPU, refused if the process cannot see it; None off GPUs."""
    import torch

    if device is None or torch.device(device).type != "cuda":
        return None
    index = torch.device(device).index
    return _state["current"] if index is None else _ordinal(index)


def _count(index: int, nbytes: int, call: str) -> None:
    """`nbytes` more allocated on GPU `index` (its memory stats) by `call`."""
    memory = _state["memory"][index]
    memory["current"] += nbytes
    memory["peak"] = max(memory["peak"], memory["current"])
    log(call, index)


def _entry_points(torch: Any) -> dict[str, Any]:
    """The C entry points torch.cuda's Python functions call, as the CUDA runtime would answer."""
    state = _state

    def exchange(index: int) -> int:
        previous = state["current"]
        if index >= 0:
            state["current"] = _ordinal(index)
        return previous

    def set_device(index: int) -> None:
        state["current"] = _ordinal(index)
        log("set_device", index)

    def synchronize() -> None:
        log("synchronize", state["current"])

    def init() -> None:
        torch.cuda.default_generators = tuple(torch.Generator() for _ in visible())
        torch.cuda._get_device_properties = _properties

    def memory_stats(index: int) -> dict:
        memory = state["memory"][_ordinal(index)]
        log("memory_stats", index)
        return {"allocated_bytes": {"all": dict(memory)}}

    def reset_peak(index: int) -> None:
        memory = state["memory"][_ordinal(index)]
        memory["peak"] = memory["current"]
        log("reset_peak", index)

    return {"_cuda_getDeviceCount": lambda: len(visible()), "_cuda_init": init, "_cuda_setDevice": set_device,
            "_cuda_getDevice": lambda: state["current"], "_cuda_exchangeDevice": exchange,
            "_cuda_maybeExchangeDevice": lambda index: exchange(index), "_cuda_synchronize": synchronize,
            "_cuda_getCurrentStream": lambda index: (0, _ordinal(index), 1), "_cuda_memoryStats": memory_stats,
            "_cuda_resetPeakMemoryStats": reset_peak, "_cuda_isInBadFork": lambda: False,
            "_cuda_cudaCachingAllocator_is_enabled": lambda: True}


def install() -> None:
    """Make this process a CUDA machine of `visible()` GPUs (once; later calls do nothing)."""
    import torch
    import torch._dynamo  # first, on a CPU build: its modules bind CUDA's C names at import

    if "current" in _state:
        return
    if torch.cuda._is_compiled():
        raise RuntimeError("this torch has CUDA; the dry run is for a CPU build")
    _state.update(current=0, calls=[], memory=[{"current": 0, "peak": 0} for _ in range(64)])
    entry_points = _entry_points(torch)
    for name, fn in entry_points.items():
        setattr(torch._C, name, fn)
    torch.cuda._exchange_device = entry_points["_cuda_exchangeDevice"]     # bound from torch._C at import
    torch.cuda._maybe_exchange_device = entry_points["_cuda_maybeExchangeDevice"]
    torch.cuda._cudart = types.SimpleNamespace()
    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    _placement(torch)
    _no_triton_driver()


def _no_triton_driver() -> None:
    """Triton asks the driver itself (libcuda), not torch, whether it can launch here: it cannot, so
    Inductor generates C++ for the CPU tensors (torch.cuda.is_available() alone would let it try)."""
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return
    driver.CudaDriver.is_active = staticmethod(driver._cuda_driver_is_active)


def _placement(torch: Any) -> None:
    """`Tensor.to` and `torch.empty` onto a GPU: torch parses the arguments, the tensor stays on CPU."""
    real_to, real_empty = torch.Tensor.to, torch.empty

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        copy = kwargs.pop("copy", False)        # Tensor.to's own; the parser is Module.to's, without it
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        index = _gpu(device)
        if index is None:
            return real_to(self, *args, copy=copy, **kwargs)
        _count(index, self.nbytes, "to")
        return real_to(self, "cpu", dtype if dtype is not None else self.dtype, non_blocking,
                       copy, memory_format=memory_format or torch.preserve_format)

    def empty(*size: Any, device: Any = None, **kwargs: Any) -> Any:
        index = _gpu(device)
        if index is None:
            return real_empty(*size, device=device, **kwargs)
        tensor = real_empty(*size, **kwargs)
        _count(index, tensor.nbytes, "empty")
        return tensor

    torch.Tensor.to, torch.empty = to, empty
