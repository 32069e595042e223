"""A model file's `DEVICE` and its one normal form: "cpu", or `cuda:N` for an index the process sees.

Every process that loads a model file (the driver, each trial, confirmation and `tuner compare`)
turns the device into this form before anything uses it, so nothing downstream sees a bare
"cuda" (`torch.cuda.set_device` refuses one) or an index the process cannot see.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.errors import ModelFileError
from tuner.workload.wording import describe_value, exception_line

def check_device(path: Path, device: Any, assigned: tuple[str, ...] | None = None) -> str:
    """`DEVICE` in its one normal form for this process: "cpu", or `cuda:N` with N an index this
    process can see (`normal_cuda`); ModelFileError naming the fix for anything else."""
    import torch

    if not isinstance(device, str):
        raise ModelFileError(f"DEVICE in {path} is {describe_value(device)}; set DEVICE to a string such as 'cpu' or 'cuda'")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ModelFileError(
            f"DEVICE={device!r} in {path} is not a device name ({exception_line(exc)}); set DEVICE='cpu' or DEVICE='cuda'"
        ) from exc
    if dev.type == "cpu":
        return "cpu"
    backend = getattr(torch, dev.type, None)
    is_available = getattr(backend, "is_available", None)
    label = dev.type.upper() if dev.type in ("cuda", "xpu", "mps") else dev.type
    if is_available is None or not is_available():
        raise ModelFileError(
            f"DEVICE={device!r} but no {label} device is available; set DEVICE='cpu' in {path} "
            f"or run on a machine with a {label} device"
        )
    count = getattr(backend, "device_count", lambda: 1)()
    if dev.type == "cuda":
        return normal_cuda(device, count=count, assigned=assigned, where=str(path))
    if dev.index is not None and dev.index >= count:
        raise ModelFileError(
            f"DEVICE={device!r} but this machine has {count} {label} device(s); "
            f"set DEVICE='{dev.type}' or an index below {count} in {path}"
        )
    return device


def normal_cuda(device: str, *, count: int, assigned: tuple[str, ...] | None = None, where: str = "") -> str:
    """A CUDA device as `cuda:N`, N an index among the `count` GPUs this process sees; nothing
    downstream ever sees a bare "cuda" (torch.cuda.set_device refuses one) or an index it cannot see.

    Without `assigned`, torch's own meaning in this process: "cuda" is its first GPU (the current
    device of a fresh process), "cuda:N" its N-th. Under Ray, `assigned` holds the node's GPU ids Ray
    gave the task (`ray.get_gpu_ids()`, the order of its CUDA_VISIBLE_DEVICES): "cuda" is the GPU
    Ray assigned, and "cuda:N" names GPU N of the node, so it becomes its index among the assigned
    ones. ModelFileError, naming the fix, when the index is one this process cannot see.
    """
    import torch

    index = torch.device(device).index
    where = f" in {where}" if where else ""
    if assigned is not None:
        if index is None:
            return "cuda:0"
        if str(index) not in assigned:
            raise ModelFileError(
                f"DEVICE={device!r}{where} names GPU {index} of the node, but Ray gave this trial GPU "
                f"{', '.join(assigned) or 'none'}; set DEVICE='cuda' to measure on the GPU Ray assigns each "
                f"trial (docs/ray.md, \"GPU platforms\")")
        return f"cuda:{assigned.index(str(index))}"
    index = 0 if index is None else index
    if index >= count:
        raise ModelFileError(f"DEVICE={device!r} but this machine has {count} CUDA device(s); "
                             f"set DEVICE='cuda' or an index below {count}{where}")
    return f"cuda:{index}"
