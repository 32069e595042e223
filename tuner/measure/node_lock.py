"""The measure and compile locks: while a trial times, nothing else of ours disturbs what it times.

It belongs to measurement (`tuner.measure`, `tuner.measure.confirmation_run`); the executors only start the
processes that take it. Every trial and confirmation process of this user on a node (local pool
or Ray) uses the same lock files.

- **CPU** (`Slot(gpu=None)`): one lock per node. Compiles take it shared (they may overlap), a
  timed section exclusive: the node's cores to itself.
- **CUDA**: one lock per GPU, named by the GPU's UUID, so processes that see it under other
  indices (Ray's `CUDA_VISIBLE_DEVICES`) agree. A timed section holds its GPU exclusively and pins
  its thread to its share of the host cores (the cores split evenly among the node's GPUs), so an
  8-GPU node times 8 trials at once without them sharing launch cores. A compile holds its GPU
  shared (its first call runs there), or exclusively when it autotunes (max-autotune,
  coordinate descent: it benchmarks kernels on that GPU). Both hold the node lock shared, so a CPU
  timed section on the same node and they exclude each other. Loading the model file and its eager
  and float64 references (`reference_lock`) count as a compile: they run on the device too.

A turnstile per lock keeps a stream of shared holders from starving a waiting exclusive one: the
exclusive holder keeps the turnstile while it waits, and a shared one passes through it first.

Lock files live in a folder of this user's (`lock_folder`: 0700, owned by this user, refused
otherwise), and each is opened without following symlinks with its owner checked, so another
local user can neither hold our locks nor point them at a file of theirs.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tuner.errors import TunerError

NODE = "node"
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")     # one folder per GPU of the host, by PCI address


@dataclass(frozen=True)
class Slot:
    """What a timed section holds: the node (`gpu` None, CPU) or one GPU (`gpu` its lock name) with
    `cores`, its share of the host cores (None: do not pin)."""

    gpu: str | None = None
    cores: frozenset[int] | None = None


def lock_folder() -> Path:
    """This user's lock folder under the temp dir, made 0700; TunerError if it is not ours."""
    folder = Path(tempfile.gettempdir()) / f"tuner-locks-{os.getuid()}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        what = "is not a folder" if not stat.S_ISDIR(info.st_mode) else f"belongs to user {info.st_uid}"
        raise TunerError(f"lock folder {folder} {what}, not a folder of yours (uid {os.getuid()}); "
                         f"remove it, or set TMPDIR to a folder only you can write")
    if info.st_mode & 0o077:          # ours, made wider by an older version or another umask
        os.chmod(folder, 0o700)
    return folder


@contextlib.contextmanager
def _flock(name: str, mode: int) -> Iterator[None]:
    path = lock_folder() / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:            # ELOOP: a symlink where the lock file should be
        raise TunerError(f"cannot open lock file {path} ({exc.strerror}); remove it") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise TunerError(f"lock file {path} is not a file of yours (uid {os.getuid()}); remove it")
        fcntl.flock(fd, mode)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _exclusive(name: str) -> Iterator[None]:
    with _flock(f"{name}-turnstile", fcntl.LOCK_EX), _flock(name, fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def _shared(name: str) -> Iterator[None]:
    with _flock(f"{name}-turnstile", fcntl.LOCK_EX):
        pass
    with _flock(name, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def _pinned(cores: frozenset[int] | None) -> Iterator[None]:
    """This thread on `cores` while open (None: as it is); its affinity restored after."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def hold_for_timing(slot: Slot) -> Iterator[None]:
    """A timed section on `slot`: the node exclusively (CPU), or its GPU exclusively and its cores."""
    if slot.gpu is None:
        with _exclusive(NODE):
            yield
        return
    with _shared(NODE), _exclusive(slot.gpu), _pinned(slot.cores):
        yield


@contextlib.contextmanager
def hold_for_compile(slot: Slot, *, autotunes: bool = False) -> Iterator[None]:
    """A compile and first call on `slot`: the node shared, and its GPU shared (exclusively when it
    `autotunes`, as it then benchmarks on the GPU). On CPU `autotunes` changes nothing."""
    if slot.gpu is None:
        with _shared(NODE):
            yield
        return
    with _shared(NODE), (_exclusive(slot.gpu) if autotunes else _shared(slot.gpu)):
        yield


def host_share(index: int, count: int, cores: Sequence[int]) -> frozenset[int]:
    """The `index`-th of `count` even, contiguous shares of `cores` (at least one core each)."""
    cores = sorted(cores)
    if count <= 1 or not cores:
        return frozenset(cores)
    if count >= len(cores):
        return frozenset({cores[index % len(cores)]})
    size = len(cores) // count
    return frozenset(cores[index * size: (index + 1) * size if index < count - 1 else len(cores)])


def device_slot(device: str) -> Slot:
    """The slot of a trial on `device` ("cpu", "cuda", "cuda:N"); asks torch about a CUDA device."""
    if not device.startswith("cuda"):
        return Slot()
    import torch

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(index)
    address = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    host_gpus = sorted(p.name.lower() for p in NVIDIA_GPUS.iterdir()) if NVIDIA_GPUS.is_dir() else []
    cores = None
    if address in host_gpus and hasattr(os, "sched_getaffinity"):
        cores = host_share(host_gpus.index(address), len(host_gpus), sorted(os.sched_getaffinity(0)))
    return Slot(gpu=f"gpu-{props.uuid}", cores=cores)


@contextlib.contextmanager
def measure_lock(device: str = "cpu") -> Iterator[None]:
    """Hold `device` for a timed section (blocks until what would disturb it is done)."""
    with hold_for_timing(device_slot(device)):
        yield


@contextlib.contextmanager
def compile_lock(device: str = "cpu",
                 patches: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> Iterator[None]:
    """Hold `device` while compiling with Inductor config `patches` (None: eager or the defaults):
    other compiles may run, timed sections on it wait; on CUDA a compile that autotunes holds its GPU."""
    slot = device_slot(device)
    autotunes = False
    if slot.gpu is not None and patches:
        from tuner.inductor import gemm_choices, triton_choices

        autotunes = gemm_choices.autotunes_gemms(patches) or triton_choices.autotunes_triton(patches)
    with hold_for_compile(slot, autotunes=autotunes):
        yield


@contextlib.contextmanager
def reference_lock(device: str = "cpu") -> Iterator[None]:
    """Hold `device` while a model file is loaded onto it and run eagerly for the references: as a
    compile holds it, so no timed section of another trial runs meanwhile. On CUDA, exclusively
    when the process has `tuner.autotune` kernels (`tuner.kernels.tuned` is loaded only by
    declaring one): an eager call may tune them, benchmarking on the GPU, as an autotuning compile does."""
    slot = device_slot(device)
    with hold_for_compile(slot, autotunes=slot.gpu is not None and "tuner.kernels.tuned" in sys.modules):
        yield
