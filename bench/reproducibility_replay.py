"""Reproducibility on a recorded space: the replay half of bench/reproducibility.py (`--replay TABLE`).

A recorded table (`tuner record-space`) holds every config's trial Measurement: its speedup over the
default compile, the median of `reps` paired rounds, with an interval of about 95%. Here the table
is the truth: config c runs at its recorded speedup T_c (the defaults at 1.0). A re-tune is the
product's own search and verdict, `tuner.search.pipeline.tune` (trials, confirmation runs, store), on
a ReplayExecutor answering from noise synthesized here, from a generator seeded per re-tune:

- **a trial** of c answers T_c * exp(N(0, s_c)), where s_c = ln(high / low) / (2 * 1.96) is the log
  standard error its recorded interval implies; its latency, interval and step values scale alike;
- **a confirmation run** (each a process of its own, so each draws afresh; `draw_rounds`) replays
  ROUNDS_FACTOR x `rounds` rounds, as many as its last look takes, so no round repeats. Round r of c
  lasts B / T_c * exp(d_r + e_cr): B the defaults' recorded latency, d_r a drift shared by every
  variant of the round (a Gaussian random walk of DRIFT a step; every paired ratio cancels it), and
  e_cr a jitter of c's own, N(0, j_c) with j_c = s_c * sqrt(reps_c) / 1.2533 / sqrt(2): the per-round
  spread of the paired ratios default/c that gives a median of reps_c rounds an interval as wide as
  the recorded one (on normal data the median's standard error is 1.2533 sigma / sqrt(n)), split
  evenly between the two variants of a ratio.

Not modelled: a config's offset from one process to the next beyond the jitter, and eager (the table
has no eager rounds, so eager fails as not recorded and is never chosen). The replay has no runtime
knob measurements, so the search runs with them off where the tuner has them (`SearchOptions`
feature-detected, as the stored stability: the same file runs against a tuner before either).
"""
from __future__ import annotations

import math
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tuner.search.pipeline import SearchEvents
from tuner.workers.replay import ReplayExecutor

ROUNDS_FACTOR = 4       # a confirmation's last look: 4 x its first (tuner.search.verdict.SEQUENTIAL_FACTOR)
DRIFT = 0.01            # log step of the drift's random walk per round
Z95 = 1.96
MEDIAN_SE = 1.2533      # standard error of a median over that of a mean, on normal data


@dataclass(frozen=True)
class Config:
    """One recorded config as the replay sees it: `truth` its speedup over the default compile, `sigma`
    the log standard error of a trial's figure, `jitter` the log sd of one confirmation round."""

    key: str
    params: tuple[tuple[str, Any], ...]
    truth: float
    sigma: float
    jitter: float
    measurement: Any                   # the recorded tuner.trial.Measurement


def configs(table: Any) -> dict[str, Config]:
    """Each config of `table` (a RecordedTable) that ran: Candidate.key -> Config (failures are left out)."""
    found = {}
    for candidate, m in table.rows:
        if not m.ok or not m.speedup:
            continue
        low, high = m.speedup_low or m.speedup, m.speedup_high or m.speedup
        sigma = math.log(high / low) / (2 * Z95) if low > 0 else 0.0
        jitter = sigma * math.sqrt(m.reps or 1) / MEDIAN_SE / math.sqrt(2)
        found[candidate.key] = Config(candidate.key, candidate.params, 1.0 if candidate.is_default else m.speedup,
                                      sigma, jitter, m)
    return found


def baseline_ms(table: Any) -> float:
    """The defaults' recorded latency (B of the module docstring)."""
    m = next(m for c, m in table.rows if c.is_default)
    return m.baseline_ms or m.latency_ms


def draw_trials(table: Any, rng: random.Random) -> dict[str, Any]:
    """Candidate.key -> the Measurement a trial of it answers in this re-tune (failures as recorded)."""
    ran = configs(table)
    answers = {}
    for candidate, m in table.rows:
        c = ran.get(candidate.key)
        if c is None:
            answers[candidate.key] = m
            continue
        sp = c.truth * math.exp(rng.gauss(0.0, c.sigma))
        by = sp / m.speedup                              # speedups scale by `by`, latencies by 1 / by
        answers[candidate.key] = replace(
            m, speedup=sp, speedup_low=m.speedup_low and m.speedup_low * by,
            speedup_high=m.speedup_high and m.speedup_high * by,
            latency_ms=m.latency_ms and m.latency_ms / by, spread_ms=m.spread_ms and m.spread_ms / by,
            intermediate=tuple(v / by for v in m.intermediate))
    return answers


def draw_rounds(table: Any, rng: random.Random, count: int) -> dict[str, tuple[float, ...]]:
    """Candidate.key -> `count` rounds (ms) of one confirmation run: drift shared, jitter per config."""
    base, drift, level = baseline_ms(table), [], 0.0
    for _ in range(count):
        level += rng.gauss(0.0, DRIFT)
        drift.append(level)
    return {c.key: tuple(base / c.truth * math.exp(d + rng.gauss(0.0, c.jitter)) for d in drift)
            for c in configs(table).values()}


class SynthesizedReplay(ReplayExecutor):
    """A ReplayExecutor whose every confirmation run replays rounds drawn for it (`fresh()`): a process
    of its own, as each of a search's confirmation runs is."""

    def __init__(self, recorded: Mapping[str, Any], *, fresh: Callable[[], dict[str, tuple[float, ...]]]):
        super().__init__(recorded, rounds=fresh())
        self._fresh = fresh

    def run_confirmation(self, request: Any) -> Any:
        self.rounds = self._fresh()
        return super().run_confirmation(request)


class _Quiet(SearchEvents):
    """A re-tune says nothing while it runs."""


@dataclass(frozen=True)
class Retune:
    """One re-tune's stored verdict: `config` its description ("defaults", "eager" or the knobs),
    `truth` the table's speedup of it (None: eager, unknown), its claim and stability (None where the
    tuner stores none), and what led there: the finalists' knobs, the choice and its elimination
    steps (`path`), and the verdict's notes."""

    seed: int
    config: str
    truth: float | None
    claim: tuple[float, float, float]
    stability: float | None
    finalists: tuple[str, ...]
    path: tuple[str, ...]
    notes: tuple[str, ...]


def describe(params: Mapping[str, Any], *, eager: bool = False) -> str:
    if eager:
        return "eager"
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "defaults"


def retune(table: Any, empty_db: Path, *, seed: int, trials: int, rounds: int) -> Retune:
    """Tune `table` once from scratch (a copy of the empty store `empty_db`), noise seeded by `seed`;
    the verdict as the store holds it."""
    from tuner.keys import GraphFingerprint, Workload
    from tuner.search import SearchOptions, Target
    from tuner.search.pipeline import tune
    from tuner.storage import Store
    from tuner.trial import Candidate, MeasureSpec

    rng = random.Random(f"{seed}/replay")
    graph = GraphFingerprint("r" * 32, 0, 1, "[]", "replayed")     # one graph, so the verdict is stored
    target = Target(workload=Workload(key=table.workload_key, name=table.model, graphs=(graph,)),
                    platform=table.platform, space=table.space)
    options = SearchOptions(MeasureSpec(f"{table.model}.py"), trials=trials, seed=seed, rounds=rounds)
    if "runtime_knobs" in {f.name for f in fields(SearchOptions)}:
        options = replace(options, runtime_knobs=False)
    executor = SynthesizedReplay(draw_trials(table, rng),
                                 fresh=lambda: draw_rounds(table, rng, ROUNDS_FACTOR * rounds))
    db = empty_db.with_name(f"retune-{seed}.db")
    shutil.copy(empty_db, db)
    try:
        with Store.open(f"sqlite:///{db}") as store:
            result = tune(options, target, store=store, executor=executor, user="bench", events=_Quiet())
        with Store.open(f"sqlite:///{db}", readonly=True) as store:
            best = store.best_config(graph.key, table.platform.key)
    finally:
        db.unlink(missing_ok=True)
    if best is None:
        raise RuntimeError(f"re-tune {seed} stored no verdict")
    truth = {c.key: c.truth for c in configs(table).values()}
    verdict = result.verdict
    return Retune(seed=seed, config=describe(best.params, eager=best.eager),
                  truth=None if best.eager else truth.get(Candidate.from_dict(best.params).key, 1.0),
                  claim=(best.speedup, best.ci_low, best.ci_high), stability=getattr(best, "stability", None),
                  finalists=tuple(describe(f.candidate.as_dict()) for f in verdict.finalists) if verdict else (),
                  path=path(verdict) if verdict else (), notes=tuple(verdict.notes) if verdict else ())


def path(verdict: Any) -> tuple[str, ...]:
    """How `verdict` (a tuner.search.verdict.Verdict, of this tuner or one before it) arrived at what it
    stored: the selection's choice, then each elimination step (or the one ablation run before them)."""
    chosen = next((f for f in verdict.finalists if f.label == verdict.chosen), None)
    done = [f"chose {verdict.chosen if chosen is None else describe(chosen.candidate.as_dict())}"]
    ablation = verdict.ablation
    for step in getattr(ablation, "steps", ()):
        done.append("undone" if step.undone else f"dropped {', '.join(step.dropped) or 'nothing'}")
    if ablation is not None and not hasattr(ablation, "steps"):
        done.append(f"dropped {', '.join(ablation.dropped) or 'nothing'}")
    return tuple(done)


def retunes(table: Any, *, repeat: int, seed: int, trials: int, rounds: int,
            progress: Callable[[Retune], None] = lambda r: None) -> list[Retune]:
    """`repeat` re-tunes of `table` with seeds `seed`..`seed + repeat - 1`, each in a fresh store."""
    from tuner.storage import ensure_schema

    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None     # SQLite off the disk
    with tempfile.TemporaryDirectory(prefix="tuner-retunes-", dir=scratch) as folder:
        empty_db = Path(folder) / "empty.db"
        ensure_schema(f"sqlite:///{empty_db}")
        done = []
        for s in range(seed, seed + repeat):
            done.append(retune(table, empty_db, seed=s, trials=trials, rounds=rounds))
            progress(done[-1])
        return done


@dataclass(frozen=True)
class Flips:
    """How often re-tunes disagree: `counts` of each stored config (most common first), `flip_rate`
    the share that differs from the most common one, `pair_rate` the share of pairs that differ."""

    counts: tuple[tuple[str, int], ...]
    flip_rate: float
    pair_rate: float

    @property
    def modal(self) -> str:
        return self.counts[0][0]


def flips(stored: Sequence[str]) -> Flips:
    """The Flips of `stored`, one stored config per search (any hashable description); ValueError when empty."""
    if not stored:
        raise ValueError("no searches to count")
    counts = Counter(stored).most_common()
    n = len(stored)
    pairs = n * (n - 1) / 2
    same = sum(k * (k - 1) / 2 for _, k in counts)
    return Flips(tuple(counts), 1 - counts[0][1] / n, 1 - same / pairs if pairs else 0.0)


def regret(best: float, figure: float) -> float:
    """How much faster `best` is than `figure` (speedups over one baseline), in %."""
    return 100 * (best / figure - 1)
