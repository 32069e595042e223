"""Inside a trial process: load the model file, compile a config, verify it against eager, time it.

`prepare` (the one measurement core) loads the file afresh, takes the eager reference, compiles
a config through `tuner.inductor`, makes the first call under the node's compile lock and
verifies it, returning a `Runner` ready to time or a `Rejected` with its status; `run_trial` is
the measurement boundary, where every failure becomes a `Measurement`; `run_confirmation`
re-measures the finalists in one process, interleaved; `run_process_timing` times one config as a
user's process does, for the process stage. Names load on first use, and with them
torch: only trial and confirmation processes (and tests) use them. `node_lock` loads no torch, so a
spare trial process (`workers/spares.py`) takes the compile lock before it imports torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.measure import node_lock
    from tuner.measure.confirmation_run import run_confirmation
    from tuner.measure.core import Rejected, Runner, allow_variants, apply_threads, prepare, prepare_training, run_trial
    from tuner.measure.device import device_sync, select
    from tuner.measure.node_lock import compile_lock, measure_lock
    from tuner.measure.process_timing import run_process_timing
    from tuner.measure.verify import Verdict, compare_gradients, compare_outputs, fp64_reference, verify_outputs

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "run_confirmation": "tuner.measure.confirmation_run",
    "run_process_timing": "tuner.measure.process_timing",
    "device_sync": "tuner.measure.device", "select": "tuner.measure.device",
    **{name: "tuner.measure.core" for name in ("Rejected", "Runner", "allow_variants", "apply_threads", "prepare",
                                               "prepare_training", "run_trial")},
    **{name: "tuner.measure.verify" for name in ("Verdict", "compare_gradients", "compare_outputs",
                                                 "fp64_reference", "verify_outputs")},
    "compile_lock": "tuner.measure.node_lock", "measure_lock": "tuner.measure.node_lock",
}

__all__ = [
    "Rejected",
    "Runner",
    "Verdict",
    "allow_variants",
    "apply_threads",
    "compare_gradients",
    "compare_outputs",
    "compile_lock",
    "device_sync",
    "fp64_reference",
    "measure_lock",
    "node_lock",
    "prepare",
    "prepare_training",
    "run_confirmation",
    "run_process_timing",
    "run_trial",
    "select",
    "verify_outputs",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "node_lock":
        return importlib.import_module("tuner.measure.node_lock")
    raise AttributeError(f"module 'tuner.measure' has no attribute {name!r}")
