"""Values that describe one trial: what to run (`TrialRequest`) and what came of it (`Measurement`).

These cross process boundaries (driver -> spawned trial process -> driver, and Ray),
so each has `to_json()` / `from_json()` over plain JSON types. Never pickle.
"""
from __future__ import annotations

import enum
import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from tuner.keys import canonical_json
from tuner.text import key_values
from tuner.trial.compile_cap import CompileCap
from tuner.trial.pruning import PruneSpec
from tuner.trial.stats import Speedup
from tuner.trial.timing import RoundPlan


class Status(str, enum.Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    WRONG_RESULT = "wrong_result"
    CANCELLED = "cancelled"      # stopped when the search was interrupted: no result, measured again on resume
    PRUNED = "pruned"            # stopped early by the pruner (tuner.trial.pruning): a partial pairing, never a pick


@dataclass(frozen=True)
class Candidate:
    """One point of the search space: the knobs that differ from Inductor's defaults.

    `params` holds only active, non-default knobs, so two Optuna proposals that
    compile identically have the same `key` and are measured once.
    The empty candidate is Inductor's defaults.
    """

    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, params: Mapping[str, Any]) -> "Candidate":
        return cls(tuple(sorted(params.items())))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        return hashlib.sha256(canonical_json(self.as_dict()).encode()).hexdigest()[:24]

    @property
    def is_default(self) -> bool:
        return not self.params

    def label(self) -> str:
        """Short human text: `defaults` or `k=v, k=v`."""
        if not self.params:
            return "defaults"
        return key_values(self.params)


@dataclass(frozen=True)
class Measurement:
    """What one trial produced. Failures are values: `status` says which, `error` says why."""

    status: Status
    latency_ms: float | None = None      # median over `reps` timed samples
    spread_ms: float | None = None       # interquartile range of those samples
    compile_s: float | None = None       # first call: tracing + compiling + one run
    peak_mem_mb: float | None = None     # the candidate's own memory (tuner.measure.device.call_peak_mb)
    reps: int | None = None
    error: str | None = None
    worker: str | None = None            # host/pid (or Ray node) that ran the trial
    threads: int | None = None           # torch's thread count in the trial process while it timed
    # Paired against Inductor's defaults in the same process, interleaved (tuner.measure):
    baseline_ms: float | None = None     # the default compile's median over the same rounds
    speedup: float | None = None         # median of per-round baseline/candidate ratios (>1: faster)
    speedup_low: float | None = None     # interval of that median (about 95%, distribution-free)
    speedup_high: float | None = None
    # Where the trial's time went, in seconds (None: not measured, as in rows before 0008 and most failures):
    start_s: float | None = None         # job handed over -> trial code begins: process start and imports
    load_s: float | None = None          # before timing, but for the compiles: model loads, eager references,
                                         # waiting for the compile lock
    baseline_compile_s: float | None = None  # the default's compile it is paired with (an FX graph cache hit
                                             # after the first trial); None in the defaults' own trial
    measure_s: float | None = None       # the timed section, waiting for the measure lock included
    compile_cached: bool | None = None   # the candidate's compile was served by Inductor's FX graph cache
                                         # (None: no cache lookup seen, e.g. eager or a bypass)
    # The objective after each paired round (tuner.trial.pruning's steps); kept in memory and JSON, not stored:
    intermediate: tuple[float, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def objective(self) -> float | None:
        """What the search minimises: the paired latency ratio candidate/default (1 / speedup).

        A measurement without a pairing (recorded before trials were paired, or replayed from a
        table of latencies) falls back to its latency; None when it has neither.
        """
        if not self.ok:
            return None
        if self.speedup:
            return 1.0 / self.speedup
        return self.latency_ms

    @property
    def steps(self) -> dict[int, float]:
        """The objective by round (from 1), as Optuna's intermediate values: `intermediate`, or for a
        pruned trial read back from the database (which stores no steps) its ratio at its last round."""
        if self.intermediate:
            return {step: value for step, value in enumerate(self.intermediate, start=1)}
        if self.status is Status.PRUNED and self.speedup and self.reps:
            return {self.reps: 1.0 / self.speedup}
        return {}

    def to_json(self) -> dict[str, Any]:
        """Plain JSON; `intermediate` only when it has values, so older JSON is unchanged."""
        data = asdict(self)
        data["status"] = self.status.value
        if self.intermediate:
            data["intermediate"] = list(self.intermediate)
        else:
            del data["intermediate"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Measurement":
        fields = dict(data)
        fields["status"] = Status(fields["status"])
        fields["intermediate"] = tuple(float(v) for v in fields.get("intermediate", ()))
        return cls(**fields)

    @classmethod
    def failed(cls, status: Status, error: str, worker: str | None = None) -> "Measurement":
        """A failure; `error` keeps its first line (the headline) and the tail of the rest."""
        if len(error) > 4000:
            head, _, rest = error.partition("\n")
            error = f"{head[:500]}\n...\n{rest[-3400:]}"
        return cls(status=status, error=error, worker=worker)


def measured_speedup(m: Measurement) -> Speedup | None:
    """A trial's paired speedup over the defaults as a Speedup; None for an unpaired one. A missing
    interval bound (never written by this version) reads as the median."""
    if m.speedup is None:
        return None
    return Speedup(m.speedup, m.speedup_low or m.speedup, m.speedup_high or m.speedup, m.reps or 0)


@dataclass(frozen=True)
class MeasureSpec:
    """How one search measures its model file. Every trial and the confirmation share it.

    `seed` seeds `get_model()`/`get_inputs()` (the same in every process); `threads` fixes
    torch's thread count (None: torch's default, which the platform key records);
    `timeout_s` is the wall-clock deadline of one trial process; `platform_key` is the
    platform the results are stored for (Ray places the work on nodes of it);
    `memory_limit_mb` caps the memory of each trial process (`--memory-limit`, applied
    inside it: `tuner.trial.memory_limit`; None: no cap). The confirmation, which holds every
    finalist at once, runs without it.

    A trial times its candidate and Inductor's defaults in paired, interleaved rounds
    (`tuner.trial.timing`): at least `min_rounds`, at most `repeat`, stopping early once the
    interval of the median ratio is narrower than `target_width` (relative) or after
    `budget_s` seconds of rounds.

    `tolerance` (`--tolerance`) is the largest norm-wise relative error against the fp32 eager
    reference a candidate whose precision is not fp32 may have (`tuner.precision`); fp32
    candidates keep the per-dtype check. None: no such candidate is accepted.

    `kernel_db` is the database the model's `@tuner.autotune` kernels declared without `db=`
    use in the trial process (`tuner search` sets its own, so they hit what it stored);
    None: their own default. The CPU GEMM choices Inductor autotunes in a verified compile are
    stored there too (`tuner.inductor.gemm_choices`); None: not stored.

    `mode` (`--mode`) is "inference" (the model's forward under no_grad) or "train" (whole
    training steps, checked on the loss and gradients: `tuner.workload.training`); JSON without it
    is inference.

    `shape` (`--shapes`, one bucket) is passed to the model file's `get_inputs` as keyword
    arguments (`tuner.workload.shapes`); () calls it without arguments.

    `gpu_ids` are the node's GPU ids Ray assigned the task that runs this trial (`ray.get_gpu_ids()`,
    set by the Ray executor on the node), and `driver_gpus` the driver's CUDA_VISIBLE_DEVICES entries
    (None: it had none); the model file's `cuda:N` then names the driver's cuda:N, GPU `driver_gpus[N]`
    of the node (GPU N without them: `tuner.workload.normal_cuda`). `gpu_ids` None: not under Ray,
    torch's own meaning of the index.
    """

    model_path: str
    seed: int = 0
    threads: int | None = None
    warmup: int = 3
    repeat: int = 20              # at most this many paired rounds per trial
    timeout_s: float = 300.0
    platform_key: str | None = None
    memory_limit_mb: int | None = None
    min_rounds: int = 6
    target_width: float | None = 0.05
    budget_s: float | None = 10.0
    tolerance: float | None = None
    kernel_db: str | None = None
    mode: str = "inference"       # "train": time whole training steps (tuner.workload.training)
    shape: tuple[tuple[str, int], ...] = ()   # --shapes bucket: get_inputs(**dict(shape)) (tuner.workload.shapes)
    gpu_ids: tuple[str, ...] | None = None    # the GPUs Ray assigned the task, as node ids (None: not under Ray)
    driver_gpus: tuple[str, ...] | None = None   # the driver's CUDA_VISIBLE_DEVICES, as node ids (None: unset)

    def plan(self) -> RoundPlan:
        """The rounds protocol of one trial: in train mode every variant takes the same number of
        optimizer steps per sample."""
        return RoundPlan(min_rounds=min(self.min_rounds, self.repeat), max_rounds=self.repeat,
                         target_width=self.target_width, budget_s=self.budget_s, warmup=self.warmup,
                         same_calls=self.mode == "train")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "MeasureSpec":
        shape = tuple((str(name), int(size)) for name, size in data.get("shape", ()))   # JSON lists
        gpus = {name: None if data.get(name) is None else tuple(map(str, data[name]))
                for name in ("gpu_ids", "driver_gpus")}
        return cls(**{**data, "shape": shape, **gpus})


@dataclass(frozen=True)
class TrialRequest:
    """Everything a fresh trial process needs; it never needs the database or the space.
    `pruning` (None: never pruned) lets the trial stop its rounds early (`tuner.trial.pruning`);
    `compile_cap` (None: none) stops the candidate's compile past it (`tuner.trial.compile_cap`)."""

    spec: MeasureSpec
    params: tuple[tuple[str, Any], ...]          # Candidate.params; the child derives the CompileConfig
    number: int = 0
    pruning: PruneSpec | None = None
    compile_cap: CompileCap | None = None

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.params)

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s

    @property
    def platform_key(self) -> str | None:
        return self.spec.platform_key

    def to_json(self) -> dict[str, Any]:
        data = {"spec": self.spec.to_json(), "params": [list(p) for p in self.params], "number": self.number}
        if self.pruning is not None:
            data["pruning"] = self.pruning.to_json()
        if self.compile_cap is not None:
            data["compile_cap"] = self.compile_cap.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TrialRequest":
        pruning, cap = data.get("pruning"), data.get("compile_cap")
        return cls(spec=MeasureSpec.from_json(data["spec"]), params=tuple((k, v) for k, v in data["params"]),
                   number=data["number"], pruning=None if pruning is None else PruneSpec.from_json(pruning),
                   compile_cap=None if cap is None else CompileCap.from_json(cap))
