"""A model file's `DEVICE` and its one normal form: "cpu", or `cuda:N` for an index the process sees.

Every process that loads a model file (the driver, each trial, confirmation and `tuner compare`)
turns the device into this form before anything uses it, so nothing downstream sees a bare
"cuda" (`torch.cuda.set_device` refuses one) or an index the process cannot see. `cuda:N` means
one GPU wherever the trial runs: what the driver's torch calls cuda:N (`normal_cuda`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.errors import ModelFileError
from tuner.workload.wording import describe_value, exception_line

def check_device(path: Path, device: Any, assigned: tuple[str, ...] | None = None,
                 driver: tuple[str, ...] | None = None) -> str:
    """`DEVICE` in its one normal form for this process: "cpu", or `cuda:N` with N an index this
    process can see (`normal_cuda`, with `assigned` and `driver`); ModelFileError naming the fix for anything else."""
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
        return normal_cuda(device, count=count, assigned=assigned, driver=driver, where=str(path))
    if dev.index is not None and dev.index >= count:
        raise ModelFileError(
            f"DEVICE={device!r} but this machine has {count} {label} device(s); "
            f"set DEVICE='{dev.type}' or an index below {count} in {path}"
        )
    return device


def normal_cuda(device: str, *, count: int, assigned: tuple[str, ...] | None = None,
                driver: tuple[str, ...] | None = None, where: str = "") -> str:
    """A CUDA device as `cuda:N`, N an index among the `count` GPUs this process sees; nothing
    downstream ever sees a bare "cuda" (torch.cuda.set_device refuses one) or an index it cannot see.

    Without `assigned`, torch's own meaning in this process: "cuda" is its first GPU (the current
    device of a fresh process), "cuda:N" its N-th. Under Ray, `assigned` holds the node's GPU ids Ray
    gave the task (`ray.get_gpu_ids()`, the order of its CUDA_VISIBLE_DEVICES) and `driver` the
    driver's CUDA_VISIBLE_DEVICES entries (None: it had none). "cuda" is the GPU Ray assigned;
    "cuda:N" is what the driver's torch calls cuda:N, the node's GPU `driver[N]` (GPU N without
    `driver`), so it becomes that GPU's index among the assigned ones. ModelFileError, naming the
    fix, when that GPU is not one this process can see.
    """
    import torch

    index = torch.device(device).index
    where = f" in {where}" if where else ""
    if assigned is not None:
        return "cuda:0" if index is None else _assigned_index(device, index, assigned, driver, where)
    index = 0 if index is None else index
    if index >= count:
        raise ModelFileError(f"DEVICE={device!r} but this machine has {count} CUDA device(s); "
                             f"set DEVICE='cuda' or an index below {count}{where}")
    return f"cuda:{index}"


def _assigned_index(device: str, index: int, assigned: tuple[str, ...], driver: tuple[str, ...] | None,
                    where: str) -> str:
    """`normal_cuda` of "cuda:`index`" in a Ray task given the GPUs `assigned`, the driver seeing `driver`."""
    if driver is not None and index >= len(driver):
        raise ModelFileError(f"DEVICE={device!r}{where} names the driver's cuda:{index}, but the driver sees "
                             f"{len(driver)} GPU(s) (its CUDA_VISIBLE_DEVICES={','.join(driver)}); set DEVICE='cuda' "
                             f"to measure on the GPU Ray assigns each trial (docs/ray.md, \"GPU platforms\")")
    gpu = str(index) if driver is None else driver[index]
    if gpu not in assigned:
        seen = "" if driver is None else f" (the driver's CUDA_VISIBLE_DEVICES={','.join(driver)})"
        raise ModelFileError(f"DEVICE={device!r}{where} names the driver's cuda:{index}, GPU {gpu} of the node{seen}, "
                             f"but Ray gave this trial GPU {', '.join(assigned) or 'none'}; set DEVICE='cuda' to "
                             f"measure on the GPU Ray assigns each trial (docs/ray.md, \"GPU platforms\")")
    return f"cuda:{assigned.index(gpu)}"
