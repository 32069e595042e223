"""A recorded stand-in for the CUDA API measurement drives (`tuner.trial.CudaApi`), for CPU tests.

It replays a simple timeline instead of running kernels: the host advances by each call's
host cost, the device runs queued work in order (never before it was launched), an event
is stamped when the device reaches it, and `synchronize` makes the host wait for the device.
Every call is logged with the device it named, so a test can say which GPU was touched.
It refuses what torch refuses: `set_device` runs torch's own argument check (a bare "cuda" is a
ValueError there, as in `torch.cuda.set_device`) and refuses an index beyond `device_count`, so a
test that passes here passes torch's checks too. Test-only: nothing in the package imports it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stream:
    device: str


class Event:
    def __init__(self, cuda: "FakeCuda") -> None:
        self.cuda, self.at_us = cuda, None

    def record(self, stream: Stream) -> None:
        self.cuda.log.append(("record", stream.device))
        self.at_us = max(self.cuda.host_us, self.cuda.device_free_us)   # stamped when the device gets there

    def elapsed_time(self, end: "Event") -> float:
        return (end.at_us - self.at_us) / 1000.0


@dataclass
class Buffer:
    cuda: "FakeCuda"
    nbytes: int
    device: str

    def zero_(self) -> None:
        self.cuda.log.append(("flush", self.device))
        self.cuda.launch(host_us=5.0, device_us=self.nbytes / self.cuda.bytes_per_us)


@dataclass
class FakeCuda:
    l2_bytes: int = 50 * 2**20
    bytes_per_us: float = 4.0e6     # 4 TB/s: a 256 MiB flush takes ~67 us
    host_us: float = 0.0
    device_free_us: float = 0.0
    allocated: int = 0
    peak: int = 0
    device_count: int = 2
    log: list[tuple[str, str]] = field(default_factory=list)

    def launch(self, *, host_us: float, device_us: float) -> None:
        """One launch: `host_us` of host work, then `device_us` queued on the device."""
        self.host_us += host_us
        self.device_free_us = max(self.host_us, self.device_free_us) + device_us

    def alloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes

    def devices(self) -> set[str]:
        return {device for _, device in self.log}

    # -- tuner.trial.CudaApi ----------------------------------------------------------
    def set_device(self, device: str) -> None:
        import torch
        from torch.cuda._utils import _get_device_index

        index = _get_device_index(torch.device(device))     # torch.cuda.set_device's own check
        if index >= self.device_count:
            raise RuntimeError(f"CUDA error: invalid device ordinal (cuda:{index} of {self.device_count})")
        self.log.append(("set_device", device))

    def synchronize(self, device: str) -> None:
        self.log.append(("synchronize", device))
        self.host_us = max(self.host_us, self.device_free_us)

    def current_stream(self, device: str) -> Stream:
        return Stream(device)

    def event(self) -> Event:
        return Event(self)

    def l2_cache_bytes(self, device: str) -> int:
        self.log.append(("l2_cache_bytes", device))
        return self.l2_bytes

    def empty_bytes(self, nbytes: int, device: str) -> Buffer:
        self.log.append(("empty", device))
        return Buffer(self, nbytes, device)

    def reset_peak_memory_stats(self, device: str) -> None:
        self.log.append(("reset_peak", device))
        self.peak = self.allocated

    def memory_allocated(self, device: str) -> int:
        self.log.append(("memory_allocated", device))
        return self.allocated

    def max_memory_allocated(self, device: str) -> int:
        self.log.append(("max_memory_allocated", device))
        return self.peak


def launches(cuda: FakeCuda, *, host_us: float, device_us: float, count: int = 1) -> Any:
    """A model call: `count` launches, each `host_us` of host work and `device_us` of kernel."""
    def call() -> None:
        for _ in range(count):
            cuda.launch(host_us=host_us, device_us=device_us)
    return call
