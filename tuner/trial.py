"""Values that describe one trial: what to run (`TrialRequest`) and what came of it (`Measurement`).

These cross process boundaries (driver -> spawned trial process -> driver, and Ray),
so each has `to_json()` / `from_json()` over plain JSON types. Never pickle.
"""
from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping


class Status(str, enum.Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    WRONG_RESULT = "wrong_result"


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces. Used for keys and hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


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
        return ", ".join(f"{k}={v}" for k, v in self.params)


@dataclass(frozen=True)
class Measurement:
    """What one trial produced. Failures are values: `status` says which, `error` says why."""

    status: Status
    latency_ms: float | None = None      # median over `reps` timed samples
    spread_ms: float | None = None       # interquartile range of those samples
    compile_s: float | None = None       # first call: tracing + compiling + one run
    peak_mem_mb: float | None = None     # peak RSS of the trial process (CPU) or peak allocated (CUDA)
    reps: int | None = None
    error: str | None = None
    worker: str | None = None            # host/pid (or Ray node) that ran the trial

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Measurement":
        fields = dict(data)
        fields["status"] = Status(fields["status"])
        return cls(**fields)

    @classmethod
    def failed(cls, status: Status, error: str, worker: str | None = None) -> "Measurement":
        """A failure; `error` keeps its first line (the headline) and the tail of the rest."""
        if len(error) > 4000:
            head, _, rest = error.partition("\n")
            error = f"{head[:500]}\n...\n{rest[-3400:]}"
        return cls(status=status, error=error, worker=worker)


@dataclass(frozen=True)
class TrialRequest:
    """Everything a fresh trial process needs; it never needs the database or the space."""

    model_path: str
    params: tuple[tuple[str, Any], ...]          # Candidate.params; the child derives the CompileConfig
    number: int = 0
    seed: int = 0
    threads: int | None = None
    warmup: int = 3
    repeat: int = 20
    timeout_s: float = 300.0
    fault: str | None = None                      # test-only: abort | hang | raise | nan
    platform_key: str | None = None               # Ray places the trial on nodes of this platform
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.params)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["params"] = [list(p) for p in self.params]
        data["extra"] = [list(p) for p in self.extra]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TrialRequest":
        fields = dict(data)
        fields["params"] = tuple((k, v) for k, v in fields["params"])
        fields["extra"] = tuple((k, v) for k, v in fields.get("extra", ()))
        return cls(**fields)
