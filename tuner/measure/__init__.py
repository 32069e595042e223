"""Inside a trial process: load the model file, compile a config, verify it against eager, time it.

`prepare` (the one measurement core) loads the file afresh, takes the eager reference, compiles
a config through `tuner.inductor`, makes the first call under the node's compile lock and
verifies it, returning a `Runner` ready to time or a `Rejected` with its status; `run_trial` is
the measurement boundary, where every failure becomes a `Measurement`; `run_confirmation`
re-measures the finalists in one process, interleaved. Importing it loads torch: only trial and
confirmation processes (and tests) do.
"""
from tuner.measure.confirmation_run import run_confirmation
from tuner.measure.device import device_sync, select
from tuner.measure.core import Rejected, Runner, allow_variants, apply_threads, prepare, prepare_training, run_trial
from tuner.measure.verify import Verdict, compare_gradients, compare_outputs, fp64_reference, verify_outputs
from tuner.measure.node_lock import compile_lock, measure_lock

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
    "prepare",
    "prepare_training",
    "run_confirmation",
    "run_trial",
    "select",
    "verify_outputs",
]
