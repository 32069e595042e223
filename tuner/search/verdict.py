"""From trials to a stored verdict: finalists, a choice, the minimal config, a held-out claim.

`conclude` runs the steps through a `run` function (an executor's `run_confirmation`), each run
a confirmation process of its own whose `ConfirmRequest.stage` ("selection", "ablation-N",
"claim") seeds its compile and round orders. Every run is a sequential test (`request`): it looks
at `rounds`, then twice and four times as many, and stops at the first look where every variant's
interval against the default compile is decided (above 1, below 1, or within EQUIVALENCE of 1), each
interval at the confidence that keeps a decision's error rate at 5% over all the looks.

1. **Selection run**: eager, the default compile and each finalist (`pick_finalists`),
   interleaved. Its even rounds choose (`tuner.search.equivalence`): among eager and the
   finalists that clear the noise against the default, the best by median and those that cannot
   be told apart from it; of them the simplest is chosen (eager, then a mode alone, then fewer
   knobs). None clearing the noise means Inductor's defaults stay.
2. **Backward elimination** (`tuner.search.elimination`), when the choice has two or more knobs:
   runs that time the config against itself minus each knob, dropping every knob whose removal
   costs nothing beyond the noise, each step re-confirmed against the one before, until no knob
   can be dropped.
3. **Claim run**, whenever anything but the defaults was chosen, in a confirmation process of its
   own: eager, the default, the minimal config and, for freezing, configs without freezing; for a
   choice of eager, eager and the default. Its even rounds decide: what is stored (the minimal
   config, eager if it beats that beyond the noise, and for the plain backend on a graph traced
   with grad enabled the best of eager and the configs without freezing that clears the noise,
   else the defaults), and the gate: what is stored must be faster than the default compile
   beyond the noise in these rounds, else Inductor's defaults are stored. Its odd rounds give the
   stability (`tuner.search.equivalence.stability`).

Every figure reported comes from the odd rounds of the claim run: rounds that played no part in
any choice nor in the gate, measured in a process that did not choose the finalist. A figure from
the rounds that passed the gate would be biased upward for a marginal config (its lucky halves
pass, its unlucky ones do not); this one is not. The figure stored is the process stage's where it
ran (`tuner.search.process_stage`: the same config in fresh processes, as a user runs it).
"""
from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from tuner.errors import TunerError
from tuner.platform import Platform
from tuner.search.elimination import Elimination, eliminate
from tuner.search.equivalence import Choice, choose_simplest, stability
from tuner.search.process_stage import ProcessVerdict
from tuner.storage import BestConfig, StudyInfo, TrialRecord
from tuner.trial import (DEFAULT, EAGER, Candidate, ConfirmRequest, ConfirmResult, MeasureSpec, Speedup, halves,
                         measured_speedup, speedup)
from tuner.version import __version__
from tuner.workload import Workload

MODE_PREFIX = "mode "
FREEZING = "freezing"
SELECTION, CLAIM = "selection", "claim"      # ConfirmRequest.stage of those runs (the elimination's: "ablation-N")


@dataclass(frozen=True)
class Finalist:
    """A candidate re-measured after the search; `search` is its paired speedup in its trial."""

    label: str
    candidate: Candidate
    search: Speedup | None = None

    @property
    def freezes(self) -> bool:
        return bool(self.candidate.as_dict().get(FREEZING))


@dataclass(frozen=True)
class Verdict:
    """What a search concluded, with the evidence.

    `stored` is the config stored for lookup (None: Inductor's defaults; `eager`: run
    uncompiled). `claim` is its speedup over the default compile and `over_eager` over eager,
    both from the odd rounds of `claim_run` (its even rounds chose and gated it). `unfrozen` is,
    when `stored` freezes, what the plain backend applies (empty candidate: the defaults, or eager
    when its label is EAGER) with its `unfrozen_claim`. `ablation` is the backward elimination of
    the chosen config's knobs; `picked` the selection's choice among configs that tied.
    """

    finalists: tuple[Finalist, ...]
    selection: ConfirmResult
    chosen: str                                  # DEFAULT, EAGER or a finalist's label
    stored: Finalist | None
    eager: bool
    claim: Speedup | None
    over_eager: Speedup | None
    claim_run: ConfirmResult
    ablation: Elimination | None = None         # the backward elimination of the choice's knobs (None: not run)
    unfrozen: Finalist | None = None
    unfrozen_claim: Speedup | None = None
    notes: tuple[str, ...] = field(default=())
    process: ProcessVerdict | None = None       # the process stage's runtime knobs and claim (process_stage)
    picked: Choice | None = None                # the selection's choice: the best, its ties, the simplest
    stability: float | None = None              # tuner.search.equivalence.stability of what is stored

    @property
    def runtime(self) -> tuple[tuple[str, str], ...]:
        """The runtime knobs stored with the verdict (none without a process stage)."""
        return self.process.runtime if self.process is not None else ()

    @property
    def compile_params(self) -> tuple[tuple[str, Any], ...] | None:
        """What the process stage measures: the stored compile knobs, () for Inductor's defaults, None for eager."""
        return None if self.eager else (self.stored.candidate.params if self.stored is not None else ())

    def with_process(self, process: ProcessVerdict) -> "Verdict":
        """This verdict after its process stage: its runtime knobs and claim in fresh processes, or
        Inductor's defaults where it did not clear the noise there (`process.kept`)."""
        notes = (*self.notes, *process.notes)
        if process.kept:
            return replace(self, process=process, notes=notes)
        return Verdict(self.finalists, self.selection, DEFAULT, None, False, None, None, self.claim_run,
                       self.ablation, notes=notes, process=process)

    @property
    def unfrozen_eager(self) -> bool:
        """Beside a freezing winner, eager beat every config without freezing."""
        return self.unfrozen is not None and self.unfrozen.label == EAGER

    def held_out(self, label: str) -> Speedup | None:
        """`label`'s speedup over the default in the selection run's held-out (odd) rounds."""
        return _speedups(halves(self.selection)[1]).get(label)


def pick_finalists(records: tuple[TrialRecord, ...], *, top: int = 2) -> tuple[Finalist, ...]:
    """The best built-in mode, the `top` best other configs, and the best config without
    freezing when those all freeze; ranked by the paired trial ratio (`Measurement.objective`)."""
    ok = sorted((r for r in records if r.measurement.objective is not None and r.params),
                key=lambda r: r.measurement.objective)
    modes = [r for r in ok if set(r.params) == {"mode"}]
    picked = [(MODE_PREFIX + str(modes[0].params["mode"]), modes[0])] if modes else []
    others = [r for r in ok if not modes or r is not modes[0]]
    picked += [(f"tuned #{i + 1}", r) for i, r in enumerate(others[:top])]
    if picked and all(r.params.get(FREEZING) for _, r in picked):
        thawed = next((r for r in others[top:] if not r.params.get(FREEZING)), None)
        if thawed is not None:
            picked.append(("tuned without freezing", thawed))
    return tuple(Finalist(label, Candidate.from_dict(r.params), measured_speedup(r.measurement))
                 for label, r in picked)


# A run looks at `rounds`, then 2x and 4x as many; an interval within 2% of 1 decides "as fast".
SEQUENTIAL_FACTOR = 4
EQUIVALENCE = 0.02


def request(spec: MeasureSpec, variants: list[tuple[str, Candidate | None]], rounds: int, *,
            stage: str) -> ConfirmRequest:
    """A confirmation of `variants` (None: eager), each once, in the order given: a sequential test
    from `rounds` to SEQUENTIAL_FACTOR times as many (module docstring); `stage` seeds its compile and
    round orders (`ConfirmRequest.rng`), so each run's differ from the others'."""
    seen, unique = set(), []
    for label, cand in variants:
        key = None if cand is None else cand.key
        if key not in seen:
            seen.add(key)
            unique.append((label, None if cand is None else cand.params))
    return ConfirmRequest(spec=spec, variants=tuple(unique), rounds=rounds, stage=stage,
                          max_rounds=SEQUENTIAL_FACTOR * rounds, target_width=EQUIVALENCE)


def decision_confidence(rounds: int) -> float:
    """The confidence of every interval a decision is taken on, for runs of `rounds` first rounds."""
    return ConfirmRequest(spec=MeasureSpec(""), variants=(), rounds=rounds,
                          max_rounds=SEQUENTIAL_FACTOR * rounds).confidence


def conclude(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, finalists: tuple[Finalist, ...],
             *, rounds: int, in_order: bool = False,
             eliminate_knobs: Callable[[int], bool] = lambda knobs: True) -> Verdict:
    """Steps 1-3 of the module docstring; `run` measures one confirmation (raises on failure).

    With `in_order` (finalists ranked by another objective than latency, `tuner.search.objectives`),
    step 1 keeps the first finalist that clears the noise, else eager if it does (it compiles
    nothing), and step 2 is skipped: the elimination weighs knobs by latency alone and would drop
    those that save memory or compile time. `eliminate_knobs(knobs)` False (a budget without the
    time for a config of that many knobs) skips step 2 too. The verdict's notes say either.
    """
    confidence = decision_confidence(rounds)
    selection = run(request(spec, [(EAGER, None), (DEFAULT, Candidate()),
                                   *((f.label, f.candidate) for f in finalists)], rounds, stage=SELECTION))
    _require_default(selection)
    choose_on = halves(selection)[0]
    by_label = {f.label: f for f in finalists}
    if in_order:
        picked = Choice(choose(choose_on, [*by_label, EAGER], first=True, confidence=confidence))
    else:
        params = {EAGER: None, **{label: f.candidate.as_dict() for label, f in by_label.items()}}
        picked = choose_simplest(choose_on, [EAGER, *by_label], params, confidence=confidence)
    notes = (picked.text(),) if picked.tied else ()
    if picked.chosen == DEFAULT:
        return Verdict(finalists, selection, DEFAULT, None, False, None, None, selection, picked=picked, notes=notes,
                       stability=stability(halves(selection)[1], DEFAULT))
    if picked.chosen == EAGER:
        return _eager_claim(run, spec, finalists, selection, rounds=rounds, picked=picked, notes=notes)
    choice = by_label[picked.chosen]
    elimination, knobs = None, len(choice.candidate.params)
    if knobs > 1 and in_order:
        notes += (f"the knobs of {choice.label} were not eliminated: the finalists were ranked by another objective "
                  f"than latency, and the elimination weighs knobs by latency alone",)
    elif knobs > 1 and not eliminate_knobs(knobs):
        notes += (f"the knobs of {choice.label} were not eliminated (--budget had no time left for it): it is "
                  f"stored as chosen, and may carry knobs that do nothing",)
    elif knobs > 1:
        elimination = eliminate(lambda variants, stage: run(request(spec, variants, rounds, stage=stage)),
                                choice.candidate, confidence=confidence)
    minimal = choice if elimination is None or not elimination.dropped else \
        Finalist(f"{choice.label} minimal", elimination.minimal, choice.search)
    return _claim_run(run, spec, finalists, selection, choice, minimal, elimination, rounds=rounds, picked=picked,
                      notes=notes)


def _eager_claim(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, finalists: tuple[Finalist, ...],
                 selection: ConfirmResult, *, rounds: int, picked: Choice, notes: tuple[str, ...]) -> Verdict:
    """Step 3 for a choice of eager: eager against the default in a run of its own, gated on its
    even rounds (`_checked` keeps the defaults when they do not clear the noise), claimed from its odd."""
    confidence = decision_confidence(rounds)
    result = run(request(spec, [(EAGER, None), (DEFAULT, Candidate())], rounds, stage=CLAIM))
    _require_default(result)
    gate_on, report_on = halves(result)
    return _checked(Verdict(finalists, selection, EAGER, None, True, _speedups(report_on).get(EAGER), None, result,
                            picked=picked, notes=notes, stability=stability(report_on, EAGER)),
                    _speedups(gate_on, confidence=confidence).get(EAGER))


def choose(result: ConfirmResult, labels: list[str], *, first: bool = False, confidence: float = 0.95) -> str:
    """The label with the highest median speedup over DEFAULT among those that clear the noise
    (with `first`: the first of them in `labels`' order); DEFAULT when none does."""
    sp = _speedups(result, confidence=confidence)
    winners = [label for label in labels if sp.get(label) is not None and sp[label].clears_noise]
    if first:
        return winners[0] if winners else DEFAULT
    return max(winners, key=lambda label: sp[label].median, default=DEFAULT)


def _claim_run(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, finalists: tuple[Finalist, ...],
               selection: ConfirmResult, choice: Finalist, minimal: Finalist, elimination: Elimination | None, *,
               rounds: int, picked: Choice, notes: tuple[str, ...]) -> Verdict:
    """Step 3: measure what would be stored beside eager, the default, the configs without freezing
    and the selection's fastest where a simpler config that tied with it was chosen (the rival);
    choose and gate on even rounds, claim from odd rounds. A rival faster than the minimal config
    beyond the noise here is stored instead: the tie did not hold up in a process of its own."""
    confidence = decision_confidence(rounds)
    thawed = _thawed_candidates(finalists, minimal, choice)
    rival = next((f for f in finalists if f.label == picked.best and picked.best != picked.chosen), None)
    variants = [(EAGER, None), (DEFAULT, Candidate()), (minimal.label, minimal.candidate),
                *(((rival.label, rival.candidate),) if rival else ()), *((f.label, f.candidate) for f in thawed)]
    result = run(request(spec, variants, rounds, stage=CLAIM))
    _require_default(result)
    choose_on, report_on = halves(result)
    stored: Finalist | None = minimal
    ahead = None if rival is None else _speedups(choose_on, baseline=minimal.label, confidence=confidence).get(rival.label)
    if rival is not None and ahead is not None and ahead.clears_noise:
        notes += (f"in the claim run {rival.label} was faster than {minimal.label} beyond the noise "
                  f"({ahead.text()}), so the tie did not hold up: {rival.label} is stored",)
        stored = rival
    eager_sp = _over_eager(choose_on, minimal.label, confidence=confidence)
    if eager_sp is not None and eager_sp.slower_beyond_noise:
        notes += (f"eager beat {minimal.label} beyond the noise, so the graph runs uncompiled",)
        stored = None
    claims, gates = _speedups(report_on), _speedups(choose_on, confidence=confidence)
    if stored is None:
        return _checked(Verdict(finalists, selection, EAGER, None, True, claims.get(EAGER), None, result,
                                elimination, notes=notes, picked=picked, stability=stability(report_on, EAGER)),
                        gates.get(EAGER))
    unfrozen, unfrozen_claim = None, None
    if stored.freezes:      # chosen on the even rounds only among those that clear the noise there: its gate
        pick = choose(choose_on, [EAGER, *(f.label for f in thawed)], confidence=confidence)
        unfrozen_claim = claims.get(pick) if pick != DEFAULT else None
        unfrozen = next((f for f in thawed if f.label == pick), Finalist(pick, Candidate()))
    return _checked(Verdict(finalists, selection, choice.label, stored, False, claims.get(stored.label),
                            _over_eager(report_on, stored.label), result, elimination, unfrozen, unfrozen_claim,
                            notes, picked=picked, stability=stability(report_on, stored.label)),
                    gates.get(stored.label))


def _thawed_candidates(finalists: tuple[Finalist, ...], minimal: Finalist, choice: Finalist) -> list[Finalist]:
    """Configs without freezing to measure beside a freezing config: it without freezing, and
    the finalists that do not freeze (what the plain backend applies to a graph traced with grad
    enabled, where it cannot freeze)."""
    if not (minimal.freezes or choice.freezes):
        return []
    base = minimal if minimal.freezes else choice
    rest = {k: v for k, v in base.candidate.as_dict().items() if k != FREEZING}
    out = [Finalist(f"{base.label} without freezing", Candidate.from_dict(rest))] if rest else []
    out += [f for f in finalists if not f.freezes]
    return out


def _checked(verdict: Verdict, gate: Speedup | None) -> Verdict:
    """The storage gate: `verdict` when `gate`, what is stored against the default compile in the
    claim run's even rounds, clears the noise; else the defaults. The claim reported (odd rounds)
    plays no part, so the figure stored is not the one the gate selected on."""
    if gate is not None and gate.clears_noise:
        return verdict
    what = "eager" if verdict.eager else (verdict.stored.label if verdict.stored else verdict.chosen)
    shown = gate.text() if gate else "no measurement"
    note = (f"{what} did not clear the noise against the default compile in the claim run, a process that "
            f"did not choose it ({shown} in the half of its rounds that decides), so Inductor's defaults stay")
    return Verdict(verdict.finalists, verdict.selection, DEFAULT, None, False, None, None, verdict.claim_run,
                   verdict.ablation, notes=(*verdict.notes, note), picked=verdict.picked,
                   stability=stability(halves(verdict.claim_run)[1], DEFAULT))


def _speedups(result: ConfirmResult, baseline: str = DEFAULT, *, confidence: float = 0.95) -> dict[str, Speedup | None]:
    """Each variant's paired speedup over `baseline` (None for a variant with no rounds), its
    interval at `confidence` (95% for a figure reported; a decision's for a decision)."""
    base = result.get(baseline)
    if base is None or not base.round_ms:
        return {}
    return {v.label: speedup(base, v, confidence=confidence) if v.round_ms else None for v in result.variants}


def _over_eager(result: ConfirmResult, label: str, *, confidence: float = 0.95) -> Speedup | None:
    eager, variant = result.get(EAGER), result.get(label)
    if eager is None or variant is None or not eager.round_ms or not variant.round_ms:
        return None
    return speedup(eager, variant, confidence=confidence)


def _require_default(result: ConfirmResult) -> None:
    baseline = result.get(DEFAULT)
    if baseline is None or not baseline.round_ms:
        stopper = result.get(result.stopped_by) if result.stopped_by not in (None, DEFAULT) else None
        why = (f"the run stopped at {stopper.label} ({stopper.status.value}: {stopper.error})" if stopper is not None
               else baseline.error if baseline else result.error)
        raise TunerError(f"confirmation could not measure the default compile: {why}; rerun the search with --debug")


def best_configs(verdict: Verdict, *, workload: Workload, platform: Platform, study: StudyInfo,
                 user: str) -> list[BestConfig]:
    """One BestConfig per graph of the workload (the whole model shares one verdict). Its figure is the
    process stage's claim in fresh processes where it ran (`Verdict.process`), else the claim run's."""
    run = verdict.claim_run
    base = halves(run)[1].get(DEFAULT)
    stored = verdict.stored
    claimed = verdict.process.claim if verdict.process is not None and verdict.process.kept else None
    runtime = dict(verdict.runtime)
    if stored is None and not verdict.eager and not runtime:
        params, sp, latency, baseline = {}, Speedup(1.0, 1.0, 1.0, len(base.round_ms)), base.latency_ms, base.latency_ms
    elif claimed is not None:
        params = {} if stored is None else stored.candidate.as_dict()
        sp, latency, baseline = claimed.claim, claimed.stored_ms, claimed.default_ms
    else:
        params = {} if stored is None else stored.candidate.as_dict()
        sp, baseline = verdict.claim, base.latency_ms
        latency = halves(run)[1].get(EAGER if stored is None else stored.label).latency_ms
    unfrozen = verdict.unfrozen
    software = dict(platform.software)
    search = verdict.stored.search if verdict.stored is not None else None
    return [BestConfig(graph_key=g.key, platform_key=platform.key, params=params,
                       is_default=stored is None and not verdict.eager, eager=verdict.eager,
                       speedup=sp.median, ci_low=sp.low, ci_high=sp.high, rounds=sp.rounds,
                       latency_ms=latency, baseline_ms=baseline, workload_key=workload.key,
                       study_id=study.id, user=user, host=socket.gethostname(), tuner_version=__version__,
                       torch_version=software.get("torch", ""), triton_version=software.get("triton", ""),
                       created_at=dt.datetime.now(dt.timezone.utc),
                       unfrozen_params=None if unfrozen is None else unfrozen.candidate.as_dict(),
                       unfrozen_speedup=None if verdict.unfrozen_claim is None else verdict.unfrozen_claim.median,
                       unfrozen_eager=verdict.unfrozen_eager,
                       search_speedup=None if search is None else search.median, runtime=runtime,
                       stability=verdict.stability)
            for g in workload.graphs]
