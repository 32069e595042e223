"""What one trial is: the values that cross process boundaries, and the rules of one measurement.

The driver, the executors, the trial processes and the store exchange these as JSON: a
`TrialRequest` and its `Measurement`, a `ConfirmRequest` and its `ConfirmResult`. Beside them
live the rules every measurement follows wherever it runs: the interleaved timing rounds
(`RoundPlan`), pruning between rounds (`PruneSpec`), the statistics behind every figure
(`Speedup`) and the memory cap a trial process sets before torch loads. Standard library only,
so a trial process can import it before torch (a test says so).
"""
from tuner.trial.confirmation import (DEFAULT, EAGER, MIN_CONFIRM_ROUNDS, ConfirmFailed, ConfirmRequest, ConfirmResult,
                                      VariantResult, halves, speedup)
from tuner.trial.cuda_api import CudaApi, TorchCuda, flush_buffer, torch_cuda
from tuner.trial.memory_limit import (MIN_MB, apply_memory_limit, exceeded, format_mb, limit_in_force,
                                      out_of_memory_line, parse_size_mb)
from tuner.trial.pruning import PruneHistory, PruneSpec, RoundPruner, RoundValues, check_pruner, replay_pruning
from tuner.trial.stats import MIN_INTERVAL_VALUES, Speedup, median_and_iqr, median_interval, paired_speedup
from tuner.trial.timing import CudaClock, RoundPlan, calibrate, interleaved_rounds, min_sample_s, time_samples
from tuner.trial.values import Candidate, Measurement, MeasureSpec, Status, TrialRequest

__all__ = [
    "DEFAULT",
    "EAGER",
    "MIN_CONFIRM_ROUNDS",
    "MIN_INTERVAL_VALUES",
    "MIN_MB",
    "Candidate",
    "ConfirmFailed",
    "ConfirmRequest",
    "ConfirmResult",
    "CudaApi",
    "CudaClock",
    "MeasureSpec",
    "Measurement",
    "PruneHistory",
    "PruneSpec",
    "RoundPlan",
    "RoundPruner",
    "RoundValues",
    "Speedup",
    "Status",
    "TorchCuda",
    "TrialRequest",
    "VariantResult",
    "apply_memory_limit",
    "calibrate",
    "check_pruner",
    "exceeded",
    "format_mb",
    "flush_buffer",
    "halves",
    "interleaved_rounds",
    "limit_in_force",
    "median_and_iqr",
    "median_interval",
    "min_sample_s",
    "out_of_memory_line",
    "paired_speedup",
    "parse_size_mb",
    "replay_pruning",
    "speedup",
    "time_samples",
    "torch_cuda",
]
