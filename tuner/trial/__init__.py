"""What one trial is: the values that cross process boundaries, and the rules of one measurement.

The driver, the executors, the trial processes and the store exchange these as JSON: a
`TrialRequest` and its `Measurement`, a `ConfirmRequest` and its `ConfirmResult`. Beside them
live the rules every measurement follows wherever it runs: the interleaved timing rounds
(`RoundPlan`), pruning between rounds (`tuner.trial.pruning`), the statistics behind every figure
(`Speedup`) and the memory cap a trial process sets before torch loads. Standard library only,
so a trial process can import it before torch (a test says so).

Over 20 names: every floor above exchanges these values (storage, workers, measure, search,
kernels, cli, report), and the trial and confirmation processes (`tuner.measure`, `tuner.workers`)
follow the measurement rules kept here (timing, pruning, statistics, the memory cap) so that the
rules stay standard-library only; each name here is used outside `tuner.trial`. What only this
package's tests or the benchmarks use stays in its module (e.g. `tuner.trial.timing.CudaClock`).
"""
from tuner.trial.compile_cap import CAP_PREFIX, CompileCap, adaptive_cap
from tuner.trial.confirmation import (DEFAULT, EAGER, MIN_CONFIRM_ROUNDS, ConfirmFailed, ConfirmRequest, ConfirmResult,
                                      VariantResult, halves, speedup)
from tuner.trial.cuda_api import CudaApi, torch_cuda
from tuner.trial.memory_limit import (MIN_MB, apply_memory_limit, exceeded, format_mb, limit_in_force,
                                      out_of_memory_line, parse_size_mb)
from tuner.trial.pruning import PruneHistory, RoundPruner, RoundValues, check_pruner, replay_pruning
from tuner.trial.process import ProcessRequest, ProcessTiming
from tuner.trial.stats import MIN_INTERVAL_VALUES, Speedup, median_and_iqr, paired_speedup
from tuner.trial.timing import (RoundPlan, calibrate, decided, interleaved_rounds, per_call_s, sampler_for,
                                time_samples)
from tuner.trial.values import Candidate, MeasureSpec, Measurement, Status, TrialRequest, measured_speedup

__all__ = [
    "CAP_PREFIX",
    "DEFAULT",
    "EAGER",
    "MIN_CONFIRM_ROUNDS",
    "MIN_INTERVAL_VALUES",
    "MIN_MB",
    "Candidate",
    "CompileCap",
    "ConfirmFailed",
    "ConfirmRequest",
    "ConfirmResult",
    "CudaApi",
    "MeasureSpec",
    "ProcessRequest",
    "ProcessTiming",
    "Measurement",
    "PruneHistory",
    "RoundPlan",
    "RoundPruner",
    "RoundValues",
    "Speedup",
    "Status",
    "TrialRequest",
    "VariantResult",
    "adaptive_cap",
    "apply_memory_limit",
    "calibrate",
    "check_pruner",
    "decided",
    "exceeded",
    "format_mb",
    "halves",
    "interleaved_rounds",
    "limit_in_force",
    "measured_speedup",
    "median_and_iqr",
    "out_of_memory_line",
    "paired_speedup",
    "parse_size_mb",
    "per_call_s",
    "replay_pruning",
    "sampler_for",
    "speedup",
    "time_samples",
    "torch_cuda",
]
