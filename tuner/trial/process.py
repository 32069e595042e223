"""A timing process: one config timed as a user's process runs it, in a fresh process of its own.

Runtime knobs (`tuner.runtime`: the allocator, OpenMP's policy) belong to a whole process, so two
settings cannot be paired inside one process as compile configs are. The process stage of a
search (`tuner.search.process_stage`) compares them, and makes the stored claim, across fresh
processes taken in alternation: each `ProcessRequest` is one process, started with its runtime
knobs, that loads the model file, compiles `params`, warms up and times, as a user's program
does, and only then checks its output against eager (`tuner.measure.process_timing`). Nothing it
ran before its timed calls could move the state they run in. These values cross processes as
JSON, like `TrialRequest`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from tuner.trial.values import MeasureSpec, Status

__all__ = ["ProcessRequest", "ProcessTiming"]

SAMPLES = 15            # timed samples per process, each at least SAMPLE_S long
SAMPLE_S = 0.010
WARMUP_S = 0.3          # warm-up calls last at least this long (and at least the spec's warm-up count)


@dataclass(frozen=True)
class ProcessRequest:
    """Time `params` (compile knobs; None: eager) in a process started with `runtime` (runtime
    knob settings); `label` names the arm it belongs to; `check` False skips the check of its output
    against eager after the timing (an arm's later processes: its first checked it)."""

    spec: MeasureSpec
    params: tuple[tuple[str, Any], ...] | None
    runtime: tuple[tuple[str, str], ...] = ()
    label: str = ""
    samples: int = SAMPLES
    check: bool = True      # check the output against eager after timing (False: time only)

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s

    def warmup_calls(self, seconds_per_call: float) -> int:
        """Warm-up calls beyond the spec's count, for a model whose call takes `seconds_per_call`:
        as many as make the warm-up last WARMUP_S in all."""
        return max(0, math.ceil(WARMUP_S / max(seconds_per_call, 1e-7)) - self.spec.warmup)

    @staticmethod
    def calls_per_sample(seconds_per_call: float) -> int:
        """Calls per timed sample: enough for a sample to last SAMPLE_S."""
        return max(1, math.ceil(SAMPLE_S / max(seconds_per_call, 1e-7)))

    @property
    def platform_key(self) -> str | None:
        return self.spec.platform_key

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec.to_json(), "params": None if self.params is None else [list(p) for p in self.params],
                "runtime": [list(r) for r in self.runtime], "label": self.label, "samples": self.samples,
                "check": self.check}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcessRequest":
        params = data["params"]
        return cls(spec=MeasureSpec.from_json(data["spec"]),
                   params=None if params is None else tuple((k, v) for k, v in params),
                   runtime=tuple((str(k), str(v)) for k, v in data.get("runtime", ())),
                   label=str(data.get("label", "")), samples=int(data.get("samples", SAMPLES)),
                   check=bool(data.get("check", True)))


@dataclass(frozen=True)
class ProcessTiming:
    """What one timing process measured: its samples (ms per call) and their median, the first call's
    seconds, the thread count; or a failure (`status`, `error`) as a value."""

    label: str
    status: Status
    samples_ms: tuple[float, ...] = ()
    latency_ms: float | None = None
    compile_s: float | None = None
    threads: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK and self.latency_ms is not None

    @classmethod
    def failed(cls, label: str, status: Status, error: str) -> "ProcessTiming":
        return cls(label=label, status=status, error=error[:4000])

    def with_label(self, label: str) -> "ProcessTiming":
        return replace(self, label=label)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "status": self.status.value, "samples_ms": list(self.samples_ms),
                "latency_ms": self.latency_ms, "compile_s": self.compile_s, "threads": self.threads,
                "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcessTiming":
        return cls(label=str(data["label"]), status=Status(data["status"]),
                   samples_ms=tuple(float(v) for v in data.get("samples_ms", ())), latency_ms=data.get("latency_ms"),
                   compile_s=data.get("compile_s"), threads=data.get("threads"), error=data.get("error"))
