"""tiny_mlp whose compiled call dies for real: out of memory, or a segmentation fault.

The eager reference is always right; while Dynamo traces `forward`, a call to `_fire` is
traced in (a disabled function: Dynamo leaves it out of the graph and calls it at run time):
- oom: allocates GREEDY_BYTES at once, more than any --memory-limit a test sets (without a
  cap the pages are never touched, so it costs nothing);
- segv: reads address 0 through ctypes (the trial process dies of SIGSEGV);
- kill: sends itself SIGKILL, as Linux's out-of-memory killer would.

`FAULT` picks one; the tests write copies of this file with another `FAULT`. With
`FAULT = None`, CRASHING_MLP_PLAN="COUNTER_FILE:f0,f1,..." (set by a test) gives the n-th
trial process that loads this file fault fn ("-", or past the end: none), counting them
in COUNTER_FILE across processes.
"""
import ctypes
import fcntl
import os
import signal
import sys

import torch
from torch import nn

FAULT = None
GREEDY_BYTES = 3 * 2**30


def _planned():
    """This trial process's planned fault, drawn once per process, for its candidate only: a
    trial loads the file twice, first for the default compile it is paired with (which must
    stay sound, or the trial fails as a whole), then for its candidate, which gets the fault."""
    plan = os.environ.get("CRASHING_MLP_PLAN")
    if not plan or not sys.argv[0].endswith("trial_process.py"):
        return None
    if not hasattr(sys, "_crashing_mlp_fault"):
        sys._crashing_mlp_fault, sys._crashing_mlp_loads = _draw(plan), 0
    sys._crashing_mlp_loads += 1
    return sys._crashing_mlp_fault if sys._crashing_mlp_loads > 1 else None


def _draw(plan):
    counter, _, faults = plan.rpartition(":")
    with open(counter, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        loads = len(handle.read())
        handle.write("x")
    chosen = faults.split(",")[loads] if loads < len(faults.split(",")) else "-"
    return None if chosen == "-" else chosen


if FAULT is None:
    FAULT = _planned()


@torch.compiler.disable
def _fire(fault):
    if fault == "oom":
        torch.empty(GREEDY_BYTES, dtype=torch.uint8)
    if fault == "segv":
        ctypes.string_at(0)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


class CrashingMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        if torch.compiler.is_compiling() and FAULT is not None:
            _fire(FAULT)
        return self.net(x)


def get_model():
    return CrashingMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
