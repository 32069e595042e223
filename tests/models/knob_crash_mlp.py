"""tiny_mlp whose compile with one knob value kills the confirmation process, or whose compiled
call with it raises while the confirmation times it; every other compile is sound.

`probe` is a custom op (identity) in `forward`. Its fake implementation runs while AOTAutograd
traces the graph inside `compile_fx`, where the config's knobs are patched in, so it sees the
knobs of the compile it is part of: with `max_fusion_size == CRASH_AT`, in a confirmation
process only (the job file in its working folder says "confirm"; workers/trial_process.py),
- abort: the process dies of SIGABRT during that compile;
- compile: that compile raises (a compile error, the process lives on);
- raise: the compiled call raises from its CALLS_BEFORE_FAULT + 1-th call on (past the first
  calls that verify it, so inside the timed rounds);
- segv: the compiled call reads address 0 from that call on (the process dies of SIGSEGV
  inside the timed rounds).
Each load of the file (one per variant) registers an op of its own, so a load's state is its own.
The tests write copies of this file with another `FAULT`, and run with Inductor's caches off
(a cache hit would skip the trace that calls the fake implementation).
"""
import ctypes
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn

FAULT = "abort"
CRASH_AT = 8
CALLS_BEFORE_FAULT = 10

_LOAD = getattr(sys, "_knob_crash_loads", 0) + 1
sys._knob_crash_loads = _LOAD
_armed = False
_calls = 0


def _in_confirmation() -> bool:
    job = Path("job.json")
    return job.exists() and json.loads(job.read_text()).get("kind") == "confirm"


@torch.library.custom_op(f"knob_crash::probe{_LOAD}", mutates_args=())
def probe(x: torch.Tensor) -> torch.Tensor:
    global _calls
    _calls += 1
    if _armed and _calls > CALLS_BEFORE_FAULT:
        if FAULT == "segv":
            ctypes.string_at(0)
        raise RuntimeError(f"knob_crash: call {_calls} of a compile with max_fusion_size={CRASH_AT}")
    return x.clone()


@probe.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    global _armed
    if torch._inductor.config.max_fusion_size == CRASH_AT and _in_confirmation():
        if FAULT == "abort":
            os.abort()
        if FAULT == "compile":
            raise RuntimeError(f"knob_crash: a compile with max_fusion_size={CRASH_AT}")
        _armed = True
    return torch.empty_like(x)


class KnobCrashMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        return probe(self.net(x))


def get_model():
    return KnobCrashMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
