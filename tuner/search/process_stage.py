"""The process stage: runtime knobs chosen, and the stored claim made, across fresh processes.

After the confirmation has chosen the compile config C (`tuner.search.verdict`), two things are
measured in timing processes (`tuner.trial.process`: one fresh process each, started with its
runtime knobs, timing as a user's program does before anything else runs in it):

1. **Runtime knobs** (`tune_runtime`), one knob at a time in registry order (the allocator, then
   OpenMP's wait policy, then its binding; on CUDA the caching allocator's options): C under the
   settings chosen so far against C under each other value of the knob, in rounds of one process
   per arm, each round in a shuffled order, paired by round. A value is taken only when its
   paired speedup clears the noise (its interval above 1), the highest median among those; so each
   stored setting was needed, over the ones before it, beyond the noise. A knob whose library is
   not installed is left out with a note (`tuner.runtime.choices_here`).
2. **The claim** (`user_claim`): the default compile in a process with no runtime knobs, as a user
   runs it without tuner, against C with the chosen settings, in rounds of one process each. Its
   even rounds gate (what is stored must not be reversed there: faster by the median, else
   Inductor's defaults stay; `_holds`) and its odd rounds give the figure stored: rounds that
   chose nothing.

Rounds: two looks, at MIN_ROUNDS (a 95% interval needs MIN_INTERVAL_VALUES ratios) and MAX_ROUNDS. An
arm whose interval against the settings before it lies wholly above or below 1 at the first look is
decided and takes no further rounds (racing); the others go on to the second look. Each look's
interval is 95%, so a knob's decision is wrong at most 10% of the time over its two looks; what is
kept must then also pass the claim's gate against the default compile. A timing process checks its
output against eager the first time its arm runs (the config passed its trial and the confirmation;
a runtime knob does not change numerics), so later ones time only.

Each timing process recompiles its config (a frozen graph is not served from Inductor's cache), so
the stage costs seconds per process: it tries knobs, in order, until `time_cap_s` is spent (the
summary names the knobs it did not try); the claim always runs.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tuner.trial import MIN_INTERVAL_VALUES, MeasureSpec, ProcessRequest, ProcessTiming, Speedup, paired_speedup

__all__ = ["Arm", "ArmRun", "MAX_ROUNDS", "MIN_ROUNDS", "ProcessVerdict", "RuntimeChoice", "RuntimeStep", "run_arms",
           "settle", "stage_cap", "tune_runtime", "user_claim"]

MIN_STAGE_S = 120.0     # the knobs may be tried this long at least (`stage_cap`)
MIN_ROUNDS = MIN_INTERVAL_VALUES
MAX_ROUNDS = 12
CLAIM_ROUNDS = 20       # even rounds gate, odd rounds report: 10 each, whose 95% interval one outlying
#                         process cannot sink (6 each, the full range, could: a clear 1.48x gate failed so)
DEFAULT_ARM, STORED_ARM = "default compile", "stored"

Run = Callable[[ProcessRequest], ProcessTiming]
Params = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Arm:
    """What one process of a comparison runs: compile knobs `params` (None: eager) under `runtime`."""

    label: str
    params: Params | None
    runtime: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ArmRun:
    """The processes of one comparison: `rounds[i][label]` is arm `label`'s process in round i."""

    arms: tuple[Arm, ...]
    rounds: tuple[dict[str, ProcessTiming], ...]

    def speedup(self, label: str, baseline: str, rounds: slice = slice(None)) -> Speedup | None:
        """`label`'s speedup over `baseline`: the median of per-round ratios of their process medians,
        over the rounds where both measured (of `rounds`)."""
        pairs = [(r[baseline].latency_ms, r[label].latency_ms) for r in self.rounds[rounds]
                 if label in r and baseline in r and r[label].ok and r[baseline].ok]
        return paired_speedup([b for b, _ in pairs], [v for _, v in pairs]) if pairs else None

    def failure(self, label: str) -> ProcessTiming | None:
        return next((r[label] for r in self.rounds if label in r and not r[label].ok), None)

    def latency_ms(self, label: str, rounds: slice = slice(None)) -> float | None:
        values = [r[label].latency_ms for r in self.rounds[rounds] if label in r and r[label].ok]
        return statistics.median(values) if values else None


def run_arms(run: Run, spec: MeasureSpec, arms: Sequence[Arm], *, baseline: str, rng: random.Random,
             min_rounds: int = MIN_ROUNDS, max_rounds: int = MAX_ROUNDS) -> ArmRun:
    """Rounds of one process per arm, each round in an order `rng` shuffles: `min_rounds`, then, for
    the arms whose interval against `baseline` is not yet decided (wholly above or below 1) and the
    baseline, on to `max_rounds` (module docstring). An arm whose process fails takes no further part
    (its failure is kept); when the baseline's fails, the run ends there. An arm's first process
    checks its output against eager; its later ones time only."""
    live = list(arms)
    rounds: list[dict[str, ProcessTiming]] = []
    while len(rounds) < max_rounds:
        done: dict[str, ProcessTiming] = {}
        for arm in rng.sample(live, len(live)):
            timing = run(ProcessRequest(spec=spec, params=arm.params, runtime=arm.runtime, label=arm.label,
                                        check=not rounds))
            done[arm.label] = timing.with_label(arm.label)
        rounds.append(done)
        live = [a for a in live if done[a.label].ok]
        result = ArmRun(tuple(arms), tuple(rounds))
        if baseline not in {a.label for a in live} or len(live) < 2:
            return result
        if len(rounds) == min_rounds:       # the first look: decided arms race no further
            live = [a for a in live if a.label == baseline or not _decided(result.speedup(a.label, baseline))]
            if len(live) < 2:
                return result
    return ArmRun(tuple(arms), tuple(rounds))


def _decided(sp: Speedup | None) -> bool:
    return sp is not None and (sp.clears_noise or sp.slower_beyond_noise)


@dataclass(frozen=True)
class RuntimeStep:
    """One knob's comparison: the settings before it, each value's speedup over them, the value taken."""

    knob: str
    before: tuple[tuple[str, str], ...]
    effects: tuple[tuple[str, Speedup | None], ...]
    chosen: str | None
    failures: tuple[tuple[str, str], ...] = ()      # value -> why its process failed
    run: ArmRun | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RuntimeChoice:
    """What the process stage chose (`runtime`, possibly empty) and its claim, user's view."""

    runtime: tuple[tuple[str, str], ...]
    steps: tuple[RuntimeStep, ...] = ()
    notes: tuple[str, ...] = ()


def tune_runtime(run: Run, spec: MeasureSpec, params: Params | None, choices: Sequence[tuple[str, str]], *,
                 seed: int = 0, time_cap_s: float | None = None,
                 progress: Callable[[str], None] = lambda line: None) -> RuntimeChoice:
    """Step 1 of the module docstring for compile knobs `params` (None: eager): each knob of `choices`
    ((knob, value) pairs that can run here) in turn, against the settings chosen so far, until
    `time_cap_s` (None: no cap) has passed; `progress` hears one line per knob."""
    by_knob: dict[str, list[str]] = {}
    for knob, value in choices:
        by_knob.setdefault(knob, []).append(value)
    current: tuple[tuple[str, str], ...] = ()
    steps: list[RuntimeStep] = []
    began = time.monotonic()
    for n, (knob, values) in enumerate(by_knob.items()):
        if time_cap_s is not None and time.monotonic() - began > time_cap_s:
            left = ", ".join(list(by_knob)[n:])
            return RuntimeChoice(current, tuple(steps), (f"{left} not tried: the process stage had spent the "
                                                         f"{time_cap_s:.0f} s it has for runtime knobs",))
        progress(f"{knob}: {', '.join(values)} against {_settings(current)}, in fresh processes")
        base = Arm("current", params, current)
        arms = [base, *(Arm(value, params, tuple(sorted((*current, (knob, value))))) for value in values)]
        result = run_arms(run, spec, arms, baseline=base.label, rng=random.Random(f"{seed}/runtime/{knob}"))
        if result.failure(base.label) is not None:
            why = result.failure(base.label).error or "no result"
            return RuntimeChoice(current, tuple(steps), (f"{knob}: the process without it failed ({_line(why)})",))
        effects = tuple((v, result.speedup(v, base.label)) for v in values)
        winners = [(sp.median, v) for v, sp in effects if sp is not None and sp.clears_noise]
        chosen = max(winners)[1] if winners else None
        failures = tuple((v, _line(f.error or "no result")) for v in values if (f := result.failure(v)) is not None)
        steps.append(RuntimeStep(knob, current, effects, chosen, failures, result))
        if chosen is not None:
            current = next(a.runtime for a in arms if a.label == chosen)
    return RuntimeChoice(current, tuple(steps))


@dataclass(frozen=True)
class UserClaim:
    """The stored config against the default compile, each in fresh processes as a user runs them:
    `gate` from the even rounds, `claim` (the figure stored) from the odd ones."""

    gate: Speedup | None
    claim: Speedup | None
    stored_ms: float | None
    default_ms: float | None
    run: ArmRun = field(compare=False, repr=False)

    @property
    def failure(self) -> ProcessTiming | None:
        return self.run.failure(STORED_ARM) or self.run.failure(DEFAULT_ARM)


def user_claim(run: Run, spec: MeasureSpec, params: Params | None, runtime: tuple[tuple[str, str], ...], *,
               seed: int = 0, rounds: int = CLAIM_ROUNDS) -> UserClaim:
    """Step 2 of the module docstring: `rounds` rounds (even ones gate, odd ones report), each one
    process of the default compile and one of `params` (None: eager) under `runtime`."""
    arms = [Arm(DEFAULT_ARM, (), ()), Arm(STORED_ARM, params, runtime)]
    result = run_arms(run, spec, arms, baseline=DEFAULT_ARM, rng=random.Random(f"{seed}/claim"),
                      min_rounds=rounds, max_rounds=rounds)
    even, odd = slice(0, None, 2), slice(1, None, 2)
    return UserClaim(gate=result.speedup(STORED_ARM, DEFAULT_ARM, even),
                     claim=result.speedup(STORED_ARM, DEFAULT_ARM, odd),
                     stored_ms=result.latency_ms(STORED_ARM, odd), default_ms=result.latency_ms(DEFAULT_ARM, odd),
                     run=result)


def stage_cap(trials_s: float, budget_left_s: float | None = None) -> float:
    """How long the stage may try runtime knobs: as long as the trials took, at least MIN_STAGE_S;
    within `budget_left_s` (what `--budget` leaves beside the claim) where there is a budget."""
    cap = max(MIN_STAGE_S, trials_s)
    return cap if budget_left_s is None else min(cap, max(0.0, budget_left_s))


def _settings(values: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values) or "no runtime knob"


def _line(text: str) -> str:
    return text.strip().partition("\n")[0][:300]


@dataclass(frozen=True)
class ProcessVerdict:
    """The process stage's outcome for one verdict: the runtime knobs chosen (`choice`), the claim
    in fresh processes (`claim`; None when nothing beyond Inductor's defaults is stored), whether
    the stored verdict passed that claim's gate (`kept`: else Inductor's defaults are stored), and
    what it left out or noticed (`notes`)."""

    choice: RuntimeChoice
    claim: UserClaim | None
    kept: bool
    notes: tuple[str, ...] = ()

    @property
    def runtime(self) -> tuple[tuple[str, str], ...]:
        return self.choice.runtime if self.kept else ()


def settle(run: Run, spec: MeasureSpec, params: Params | None, choices: Sequence[tuple[str, str]], *,
           seed: int = 0, notes: Sequence[str] = (), time_cap_s: float | None = None,
           progress: Callable[[str], None] = lambda line: None) -> ProcessVerdict:
    """Steps 1 and 2 for a verdict whose compile part is `params` (() Inductor's defaults, None eager):
    the runtime knobs (within `time_cap_s`), then the claim of compile part and knobs against the
    default compile. Inductor's defaults with no runtime knob need no claim (nothing is stored beyond
    the defaults). `progress` hears one line per step."""
    choice = (tune_runtime(run, spec, params, choices, seed=seed, time_cap_s=time_cap_s, progress=progress)
              if choices else RuntimeChoice(()))
    if params == () and not choice.runtime:
        return ProcessVerdict(choice, None, True, (*notes, *choice.notes))
    progress(f"the claim: {CLAIM_ROUNDS} rounds of the default compile against what is stored "
             f"({_settings(choice.runtime)}), in fresh processes")
    claim = user_claim(run, spec, params, choice.runtime, seed=seed)
    kept = _holds(claim)
    extra = []
    if not kept:
        failed = claim.failure
        shown = (f"a process failed: {_line(failed.error or 'no result')}" if failed is not None
                 else claim.gate.text() if claim.gate else "no measurement")
        extra.append(f"in fresh processes, as a user runs it, it was not faster than the default compile "
                     f"({shown} in the half of the rounds that decides), so Inductor's defaults stay")
    elif not claim.gate.clears_noise:
        extra.append(f"in fresh processes, as a user runs it, it was faster by the median but not beyond the "
                     f"noise between processes ({claim.gate.text()} in the half of the rounds that decides); "
                     f"what it was chosen on cleared the noise, so it is kept, with the figure those "
                     f"processes give")
    return ProcessVerdict(choice, claim, kept, (*notes, *choice.notes, *extra))


def _holds(claim: UserClaim) -> bool:
    """Whether fresh processes bear out what is stored. What reaches the claim was chosen beyond the
    noise already (the confirmation's compile config; a runtime knob over the settings before it),
    so the claim's deciding half checks that a user's process does not reverse it: its median above
    1, not slower beyond the noise. An interval wholly above 1 is not required: a process that
    starts slow (2-20x, from what else the machine runs) widens a 10-round interval past 1, and
    a veto on width alone stored Inductor's defaults for a config 1.4x faster by the median."""
    gate = claim.gate
    return (claim.failure is None and gate is not None and claim.claim is not None
            and gate.median > 1.0 and not gate.slower_beyond_noise)
