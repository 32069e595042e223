"""tiny_mlp with a fault that fires only in the compiled model: the tests' failures, made for real.

The eager reference is always right; while Dynamo traces `forward`, the fault is traced in:
- abort: os.abort() (the trial process dies of SIGABRT -> crashed)
- exit: os._exit(3) (-> crashed, "status 3")
- hang: sleeps far past any deadline (-> timeout), in the compiled call: under the node's compile
  lock, held shared, so another trial's timed section waits too, until the trial's watchdog
  (tuner.measure.watchdog, 10 s) or its deadline ends it
- stall: sleeps far past any deadline while the file loads for the candidate, before any lock is
  taken (-> timeout; what a test of trials in flight wants: the others carry on)
- raise: RuntimeError("injected fault ...") from the first call (-> runtime_error)
- nan: the compiled output is NaN (-> wrong_result)

`FAULT` picks one. `tests/helpers/faults.py` writes copies of this file with another `FAULT`; with
`FAULT = None`, FAULTY_MLP_PLAN="COUNTER_FILE:f0,f1,..." (set by a test) gives the n-th trial
process that loads this file fault fn ("-", or past the end: none), counting loads in
COUNTER_FILE across processes.
"""
import fcntl
import os
import sys
import time

import torch
from torch import nn

FAULT = None


def _planned():
    """This trial process's planned fault, drawn once per process, for its candidate only: a
    trial loads the file twice, first for the default compile it is paired with (which must
    stay sound, or the trial fails as a whole), then for its candidate, which gets the fault."""
    plan = os.environ.get("FAULTY_MLP_PLAN")
    if not plan or not sys.argv[0].endswith("trial_process.py"):
        return None
    if not hasattr(sys, "_faulty_mlp_fault"):
        sys._faulty_mlp_fault, sys._faulty_mlp_loads = _draw(plan), 0
    sys._faulty_mlp_loads += 1
    return sys._faulty_mlp_fault if sys._faulty_mlp_loads > 1 else None


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
if FAULT == "stall":
    time.sleep(10_000)


@torch.compiler.disable
def _fire(fault):
    """Runs at the compiled call (Dynamo leaves disabled functions out of the graph)."""
    if fault == "abort":
        os.abort()
    if fault == "exit":
        os._exit(3)
    if fault == "hang":
        time.sleep(10_000)
    if fault == "raise":
        raise RuntimeError("injected fault (tests/models/faulty_mlp.py)")


class FaultyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        if torch.compiler.is_compiling():
            if FAULT == "nan":
                x = x * float("nan")
            elif FAULT is not None:
                _fire(FAULT)
        return self.net(x)


def get_model():
    return FaultyMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
