"""The tiny MLP, whose get_model() says what process it runs in: written as JSON to the file named by
PROCESS_PROBE (appended, one line per call): OpenMP's wait policy, whether jemalloc is mapped, and
whether glibc serves a 5 MiB block from the heap (`retains`: the allocator pinned as tuner pins it in
trials and confirmations) or with mmap (glibc as a process that freed nothing big starts)."""
import ctypes
import json
import os

import torch
from torch import nn


class _Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]


def _retains() -> bool:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Info
    before = libc.mallinfo2().hblks
    block = ctypes.create_string_buffer(5 << 20)    # 5 MiB: above the threshold a smaller free could have set
    mapped = libc.mallinfo2().hblks > before
    del block
    return not mapped


def get_model():
    out = os.environ.get("PROCESS_PROBE")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"wait": os.environ.get("OMP_WAIT_POLICY"),
                                "jemalloc": "libjemalloc" in open("/proc/self/maps").read(),
                                "retains": _retains()}) + "\n")
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()


def get_inputs():
    return (torch.randn(8, 32),)
