"""Values that cross the storage boundary. ORM rows never leave `storage/`."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Union

from tuner.keys import Platform, Workload, canonical_json
from tuner.trial import Measurement


@dataclass(frozen=True)
class StudyInfo:
    id: int
    workload_key: str
    platform_key: str
    space_hash: str
    sampler: str
    seed: int | None
    trials_requested: int
    created_at: datetime
    user: str
    host: str
    tuner_version: str = ""
    torch_version: str = ""          # the study's platform's torch and triton (its trials' too)
    triton_version: str = ""
    objectives: tuple[str, ...] = ("latency",)   # what the study minimised (tuner.search.objectives)
    prefer: str = "latency"          # the objective that picked its stored operating point


@dataclass(frozen=True)
class TrialRecord:
    """One measured candidate of a study. `number` is unique within the study, and so is `candidate_key`."""

    number: int
    candidate_key: str
    params: dict[str, Any]           # Candidate.as_dict(): only non-default knobs
    measurement: Measurement
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class BestConfig:
    """The confirmed best config for one graph on one platform, with its evidence and provenance.

    `is_default` true means "tuned, and Inductor's defaults won": lookup applies nothing
    but knows the workload was tuned. `eager` true means "tuned, and running the graph
    uncompiled won" (params {}, is_default false): lookup runs that graph eagerly.
    When `params` turn freezing on, which only `tuner.compile` can apply, `unfrozen_params`
    is the config measured beside it for the plain `backend="tuner"` ({}: Inductor's
    defaults won among the configs without freezing) with its `unfrozen_speedup`; None when
    `params` do not freeze. `unfrozen_eager` true (with `unfrozen_params` {}): running the graph
    uncompiled beat every config without freezing, so the plain backend runs it eagerly. `search_speedup` is the winner's figure during the search (its
    paired trial), kept so reports can show the gap to the confirmed `speedup`. `unsafe` true: the
    search ran with `--unsafe` (knobs that change numerics were in its space), so lookup applies the
    row only where the compile call opts in (`options={"unsafe": True}`); every row whose knobs
    include an unsafe one has it set (`tuner.storage.trust`).

    `runtime` holds the verdict's runtime knobs (`tuner.runtime`: settings of the process the model
    runs in, e.g. `{"runtime.allocator": "jemalloc"}`), never mixed into `params`: they apply beside
    any verdict, a config, Inductor's defaults (`is_default`) or eager, so a defaults-won or eager
    row has `params` {} and may have `runtime` set; {} when the process as it starts won.
    `stability` is the share of bootstrap resamples of the confirmation's held-out rounds in which
    this config was the fastest or tied, in [0, 1]; None where it was not measured.
    """

    graph_key: str
    platform_key: str
    params: dict[str, Any]           # knob values (Candidate.as_dict()); {} when is_default
    is_default: bool
    speedup: float                   # median of per-round (default / candidate) latency ratios
    ci_low: float                    # interval of that speedup
    ci_high: float
    rounds: int                      # paired interleaved rounds behind the interval
    latency_ms: float | None         # tuned latency in the confirmation run
    baseline_ms: float | None        # default-compile latency in the confirmation run
    workload_key: str = ""
    study_id: int | None = None
    user: str = ""
    host: str = ""
    tuner_version: str = ""
    torch_version: str = ""
    triton_version: str = ""
    created_at: datetime | None = None   # when it was measured; None: now, when saved
    source: str = "search"           # "search", "import" or "merge"
    origin: str = ""                 # import: the file name; merge: the source URL (no password)
    eager: bool = False              # the verdict is "run this graph uncompiled"
    unfrozen_params: dict[str, Any] | None = None   # what backend="tuner" applies when params freeze
    unfrozen_speedup: float | None = None
    unfrozen_eager: bool = False        # beside a freezing winner, running uncompiled beat every config without it
    search_speedup: float | None = None             # the winner's paired speedup in its trial
    unsafe: bool = False             # its search ran with --unsafe: lookup applies it only on opt-in
    runtime: dict[str, str] = field(default_factory=dict)   # runtime knob -> value; {}: the process as it starts
    stability: float | None = None   # share of held-out resamples it won or tied, in [0, 1]


@dataclass(frozen=True)
class HistoryEntry:
    """One measurement offered as the best config of its graph and platform (`kept`: it won)."""

    best: BestConfig
    kept: bool
    recorded_at: datetime            # when this database received it
    measurement_key: str


@dataclass(frozen=True)
class FailureRule:
    """A knob value, or a pair of them, that always failed to compile on one platform.

    Learned when at least 2 trials holding it there failed with compile_error and no trial
    holding it compiled (see tuner.storage.failures). `knobs` holds one or two (knob, value)
    items sorted by name; `failures` is the evidence (compile errors behind it); `source`
    is "search" (learned from this database's trials), "import" or "merge", with `origin`
    the file name or the source's safe URL.
    """

    platform_key: str
    knobs: tuple[tuple[str, Any], ...]
    failures: int
    source: str = "search"
    origin: str = ""
    created_at: datetime | None = None   # when this database first held it; None: now

    @property
    def key(self) -> str:
        """The rule's identity on its platform: a hash of its knobs (canonical JSON)."""
        return rule_key(dict(self.knobs))

    def held_by(self, params: Mapping[str, Any]) -> bool:
        """Whether a candidate's params (Candidate.as_dict()) set every knob of the rule to
        its value (compared as canonical JSON, so True never matches 1)."""
        return all(name in params and canonical_json(params[name]) == canonical_json(value)
                   for name, value in self.knobs)

    def label(self) -> str:
        return " + ".join(f"{name}={canonical_json(value)}" for name, value in self.knobs)


def rule_key(knobs: Mapping[str, Any]) -> str:
    """The key of a failure rule's knobs: 32 hex digits of sha256 over their canonical JSON."""
    return hashlib.sha256(canonical_json(dict(knobs)).encode()).hexdigest()[:32]


Scalar = Union[bool, int, float, str]


@dataclass(frozen=True)
class KernelConfig:
    """One kernel's kept tile config on one platform, with its evidence and provenance."""

    kernel_key: str
    kernel_name: str
    platform_key: str
    key_args: tuple[tuple[str, Scalar], ...]     # the key arguments' values, for display
    dtypes: str                                  # the tensor arguments' dtypes, comma-separated
    config: tuple[tuple[str, Scalar], ...]       # block sizes and Triton launch options
    latency_ms: float
    spread_ms: float
    configs_tried: int
    space_size: int
    user: str
    host: str
    tuner_version: str
    torch_version: str
    triton_version: str
    created_at: datetime | None = None           # None: now, when saved
    source: str = "search"

    def config_dict(self) -> dict[str, Scalar]:
        return dict(self.config)


@dataclass(frozen=True)
class Snapshot:
    """Best configs, learned failure rules and kernel configs, with the platforms and workloads
    (graphs included) they refer to.

    What `Store.snapshot` reads and `Store.apply_snapshot` writes: the content of an
    exchange file or of a merge.
    """

    platforms: tuple[Platform, ...]
    workloads: tuple[Workload, ...]
    bests: tuple[BestConfig, ...]
    rules: tuple[FailureRule, ...] = ()
    kernels: tuple[KernelConfig, ...] = ()     # kernel tile configs and Inductor's harvested choices


@dataclass(frozen=True)
class ApplyReport:
    """What an import or merge did. `records` = stored + not_better + already_present."""

    records: int
    stored: int                      # became the best config of its graph and platform
    not_better: int                  # refused: the stored config has better or fresher evidence
    already_present: int             # the same measurement was already in this database
    platforms_added: int
    workloads_added: int
    rules: int = 0                   # failure rules in the snapshot
    rules_stored: int = 0            # of which new here, or stronger than the stored evidence
    kernels: int = 0                 # kernel configs in the snapshot
    kernels_stored: int = 0          # of which new here, or faster than the stored one
