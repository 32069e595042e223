"""The CUDA calls measurement makes, each naming its device.

Every call takes the device of the variant being measured ("cuda:1"), never torch's current
device: with `DEVICE = "cuda:1"` a bare `torch.cuda.synchronize()` or `max_memory_allocated()`
acts on cuda:0. `CudaApi` is the seam (`TorchCuda` drives torch.cuda; tests drive a recorded
stand-in, tests/helpers/cuda_stand_in.py, on CPU). Standard library only: torch loads when a method runs.
"""
from __future__ import annotations

from typing import Any, Protocol

__all__ = ["CudaApi", "TorchCuda", "flush_buffer", "torch_cuda"]


class CudaApi(Protocol):
    def set_device(self, device: str) -> None: ...
    def synchronize(self, device: str) -> None: ...
    def current_stream(self, device: str) -> Any: ...
    def event(self) -> Any: ...                     # .record(stream), .elapsed_time(end) in ms
    def l2_cache_bytes(self, device: str) -> int: ...
    def empty_bytes(self, nbytes: int, device: str) -> Any: ...   # a buffer with .zero_()
    def reset_peak_memory_stats(self, device: str) -> None: ...
    def memory_allocated(self, device: str) -> int: ...
    def max_memory_allocated(self, device: str) -> int: ...


class TorchCuda:
    """`CudaApi` over torch.cuda."""

    def __init__(self) -> None:
        import torch

        self.torch, self.cuda = torch, torch.cuda

    def set_device(self, device: str) -> None:
        self.cuda.set_device(self.torch.device(device))

    def synchronize(self, device: str) -> None:
        self.cuda.synchronize(device)

    def current_stream(self, device: str) -> Any:
        return self.cuda.current_stream(device)

    def event(self) -> Any:
        return self.cuda.Event(enable_timing=True)

    def l2_cache_bytes(self, device: str) -> int:
        return int(self.cuda.get_device_properties(device).L2_cache_size)

    def empty_bytes(self, nbytes: int, device: str) -> Any:
        return self.torch.empty(max(1, nbytes // 4), dtype=self.torch.int32, device=device)

    def reset_peak_memory_stats(self, device: str) -> None:
        self.cuda.reset_peak_memory_stats(device)

    def memory_allocated(self, device: str) -> int:
        return int(self.cuda.memory_allocated(device))

    def max_memory_allocated(self, device: str) -> int:
        return int(self.cuda.max_memory_allocated(device))


_torch_cuda: list[TorchCuda] = []


def torch_cuda() -> TorchCuda:
    """The process's one `TorchCuda`."""
    if not _torch_cuda:
        _torch_cuda.append(TorchCuda())
    return _torch_cuda[0]


_flush_buffers: dict[tuple[int, str], Any] = {}


def flush_buffer(device: str, api: CudaApi) -> Any:
    """The process's one L2 flush buffer for `device`: twice its L2 cache, made on first use and
    shared by every clock after (a 256 MiB buffer per variant would crowd the model's memory)."""
    key = (id(api), device)
    if key not in _flush_buffers:
        l2 = api.l2_cache_bytes(device) or 64 * 2**20     # 0 where the driver does not say
        _flush_buffers[key] = api.empty_bytes(2 * l2, device)
    return _flush_buffers[key]
