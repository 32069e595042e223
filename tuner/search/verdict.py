"""From trials to a stored verdict: finalists, a choice, the minimal config, a held-out claim.

`conclude` runs the steps through a `run` function (an executor's `run_confirmation`), each run
a confirmation process of its own whose `ConfirmRequest.stage` ("selection", "ablation",
"claim") seeds its compile and round orders:

1. **Selection run**: eager, the default compile and each finalist (`pick_finalists`),
   interleaved. Its even rounds choose: among eager and the finalists, those whose paired
   speedup over the default clears the noise (interval above 1), the highest median; none
   means Inductor's defaults stay.
2. **Ablation**, when the choice is a config of two or more knobs: one run times the
   choice against itself minus each knob; a knob stays only if removing it makes the
   choice slower beyond the noise (its even rounds decide).
3. **Claim run**, whenever anything but the defaults was chosen, in a confirmation process
   of its own: eager, the default, the minimal config (the full choice beside it when the
   ablation dropped knobs) and, for freezing, configs without freezing; for a choice of eager,
   eager and the default. Its even rounds decide: what is stored (the minimal config unless it
   is slower than the choice beyond the noise, eager if it beats that beyond the noise, and for
   the plain backend on a graph traced with grad enabled the best of eager and the configs
   without freezing that clears the noise, else the defaults), and the gate: what is stored
   must be faster than the default compile beyond the noise in these rounds, else Inductor's
   defaults are stored.

Every figure reported and stored comes from the odd rounds of the claim run: rounds that played
no part in any choice nor in the gate, measured in a process that did not choose the finalist.
A figure from the rounds that passed the gate would be biased upward for a marginal config (its
lucky halves pass, its unlucky ones do not); this one is not. So a stored config cleared the
noise against the default compile (and was not beaten by eager) in rounds of its own, and its
figure is an unbiased estimate whose interval, for a marginal config, may reach below 1.
"""
from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass, field
from typing import Callable

from tuner.errors import TunerError
from tuner.platform import Platform
from tuner.storage import BestConfig, StudyInfo, TrialRecord
from tuner.trial import (DEFAULT, EAGER, Candidate, ConfirmRequest, ConfirmResult, MeasureSpec, Speedup, halves,
                         measured_speedup, speedup)
from tuner.version import __version__
from tuner.workload import Workload

MODE_PREFIX = "mode "
FREEZING = "freezing"
SELECTION, ABLATION, CLAIM = "selection", "ablation", "claim"      # ConfirmRequest.stage of each run


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
class Ablation:
    """Which knobs of the chosen config mattered: `effects[knob]` is how much faster the choice
    is than the choice without that knob (None: without it, it failed)."""

    chosen: Finalist
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    effects: tuple[tuple[str, Speedup | None], ...]
    result: ConfirmResult


@dataclass(frozen=True)
class Verdict:
    """What a search concluded, with the evidence.

    `stored` is the config stored for lookup (None: Inductor's defaults; `eager`: run
    uncompiled). `claim` is its speedup over the default compile and `over_eager` over eager,
    both from the odd rounds of `claim_run` (its even rounds chose and gated it). `unfrozen` is, when `stored` freezes, what the
    plain backend applies (empty candidate: the defaults, or eager when its label is EAGER)
    with its `unfrozen_claim`.
    """

    finalists: tuple[Finalist, ...]
    selection: ConfirmResult
    chosen: str                                  # DEFAULT, EAGER or a finalist's label
    stored: Finalist | None
    eager: bool
    claim: Speedup | None
    over_eager: Speedup | None
    claim_run: ConfirmResult
    ablation: Ablation | None = None
    unfrozen: Finalist | None = None
    unfrozen_claim: Speedup | None = None
    notes: tuple[str, ...] = field(default=())

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


def request(spec: MeasureSpec, variants: list[tuple[str, Candidate | None]], rounds: int, *,
            stage: str) -> ConfirmRequest:
    """A confirmation of `variants` (None: eager), each once, in the order given; `stage` seeds its
    compile and round orders (`ConfirmRequest.rng`), so each run's differ from the others'."""
    seen, unique = set(), []
    for label, cand in variants:
        key = None if cand is None else cand.key
        if key not in seen:
            seen.add(key)
            unique.append((label, None if cand is None else cand.params))
    return ConfirmRequest(spec=spec, variants=tuple(unique), rounds=rounds, stage=stage)


def conclude(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, finalists: tuple[Finalist, ...],
             *, rounds: int, in_order: bool = False) -> Verdict:
    """Steps 1-3 of the module docstring; `run` measures one confirmation (raises on failure).

    With `in_order` (finalists ranked by another objective than latency, `tuner.search.objectives`),
    step 1 keeps the first finalist that clears the noise, else eager if it does (it compiles
    nothing), and step 2 is skipped: the ablation weighs knobs by latency alone and would drop
    those that save memory or compile time.
    """
    selection = run(request(spec, [(EAGER, None), (DEFAULT, Candidate()),
                                   *((f.label, f.candidate) for f in finalists)], rounds, stage=SELECTION))
    _require_default(selection)
    choose_on = halves(selection)[0]
    labels = [f.label for f in finalists]
    chosen = choose(choose_on, [*labels, EAGER] if in_order else [EAGER, *labels], first=in_order)
    by_label = {f.label: f for f in finalists}
    if chosen == DEFAULT:
        return Verdict(finalists, selection, chosen, None, False, None, None, selection)
    if chosen == EAGER:
        return _eager_claim(run, spec, finalists, selection, rounds=rounds)
    choice = by_label[chosen]
    ablate_it = len(choice.candidate.params) > 1 and not in_order
    ablation = ablate(run, spec, choice, rounds=rounds) if ablate_it else None
    return _claim_run(run, spec, finalists, selection, choice, _minimal(choice, ablation), ablation, rounds=rounds)


def _eager_claim(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, finalists: tuple[Finalist, ...],
                 selection: ConfirmResult, *, rounds: int) -> Verdict:
    """Step 3 for a choice of eager: eager against the default in a run of its own, gated on its
    even rounds (`_checked` keeps the defaults when they do not clear the noise), claimed from its odd."""
    result = run(request(spec, [(EAGER, None), (DEFAULT, Candidate())], rounds, stage=CLAIM))
    _require_default(result)
    gate_on, report_on = halves(result)
    return _checked(Verdict(finalists, selection, EAGER, None, True, _speedups(report_on).get(EAGER), None, result),
                    _speedups(gate_on).get(EAGER))


def choose(result: ConfirmResult, labels: list[str], *, first: bool = False) -> str:
    """The label with the highest median speedup over DEFAULT among those that clear the noise
    (with `first`: the first of them in `labels`' order); DEFAULT when none does."""
    sp = _speedups(result)
    winners = [label for label in labels if sp.get(label) is not None and sp[label].clears_noise]
    if first:
        return winners[0] if winners else DEFAULT
    return max(winners, key=lambda label: sp[label].median, default=DEFAULT)


def ablate(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, choice: Finalist, *,
           rounds: int) -> Ablation:
    """Time `choice` against itself minus each knob; keep a knob only if dropping it costs beyond the noise."""
    params = choice.candidate.as_dict()
    variants = [("chosen", choice.candidate)]
    variants += [(f"without {k}", Candidate.from_dict({n: v for n, v in params.items() if n != k})) for k in params]
    result = run(request(spec, variants, rounds, stage=ABLATION))
    choose_on = halves(result)[0]
    base = choose_on.get("chosen")
    if base is None or not base.round_ms:
        return Ablation(choice, tuple(sorted(params)), (), (), result)
    effects = []
    for knob in sorted(params):
        without = choose_on.get(f"without {knob}")
        effects.append((knob, speedup(without, base) if without is not None and without.round_ms else None))
    kept = tuple(k for k, sp in effects if sp is None or sp.clears_noise)
    return Ablation(choice, kept, tuple(k for k in sorted(params) if k not in kept), tuple(effects), result)


def _minimal(choice: Finalist, ablation: Ablation | None) -> Finalist:
    if ablation is None or not ablation.dropped:
        return choice
    params = {k: v for k, v in choice.candidate.as_dict().items() if k in ablation.kept}
    return Finalist(f"{choice.label} minimal", Candidate.from_dict(params), choice.search)


def _claim_run(run: Callable[[ConfirmRequest], ConfirmResult], spec: MeasureSpec, finalists: tuple[Finalist, ...],
               selection: ConfirmResult, choice: Finalist, minimal: Finalist, ablation: Ablation | None, *,
               rounds: int) -> Verdict:
    """Step 3: measure what would be stored beside eager, the default, the full choice (when
    the ablation dropped knobs) and the configs without freezing; choose and gate on even rounds,
    claim from odd rounds."""
    thawed = _thawed_candidates(finalists, minimal, choice)
    variants = [(EAGER, None), (DEFAULT, Candidate()), (minimal.label, minimal.candidate),
                (choice.label, choice.candidate), *((f.label, f.candidate) for f in thawed)]
    variants = list({label: (label, c) for label, c in variants}.values())   # minimal is the choice when nothing was dropped
    result = run(request(spec, variants, rounds, stage=CLAIM))
    _require_default(result)
    choose_on, report_on = halves(result)
    stored = minimal
    if minimal.candidate != choice.candidate:
        minimal_sp = _speedups(choose_on, baseline=choice.label).get(minimal.label)
        if minimal_sp is None or minimal_sp.slower_beyond_noise:
            stored = choice
    notes = []
    eager_sp = _over_eager(choose_on, stored.label)
    if eager_sp is not None and eager_sp.slower_beyond_noise:
        notes.append(f"eager beat {stored.label} beyond the noise, so the graph runs uncompiled")
        stored = None
    claims, gates = _speedups(report_on), _speedups(choose_on)
    if stored is None:
        return _checked(Verdict(finalists, selection, EAGER, None, True, claims.get(EAGER), None, result,
                                ablation, notes=tuple(notes)), gates.get(EAGER))
    unfrozen, unfrozen_claim = None, None
    if stored.freezes:      # chosen on the even rounds only among those that clear the noise there: its gate
        pick = choose(choose_on, [EAGER, *(f.label for f in thawed)])
        unfrozen_claim = claims.get(pick) if pick != DEFAULT else None
        unfrozen = next((f for f in thawed if f.label == pick), Finalist(pick, Candidate()))
    return _checked(Verdict(finalists, selection, choice.label, stored, False, claims.get(stored.label),
                            _over_eager(report_on, stored.label), result, ablation, unfrozen, unfrozen_claim,
                            tuple(notes)), gates.get(stored.label))


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
                   verdict.ablation, notes=(*verdict.notes, note))


def _speedups(result: ConfirmResult, baseline: str = DEFAULT) -> dict[str, Speedup | None]:
    """Each variant's paired speedup over `baseline` (None for a variant with no rounds)."""
    base = result.get(baseline)
    if base is None or not base.round_ms:
        return {}
    return {v.label: speedup(base, v) if v.round_ms else None for v in result.variants}


def _over_eager(result: ConfirmResult, label: str) -> Speedup | None:
    eager, variant = result.get(EAGER), result.get(label)
    if eager is None or variant is None or not eager.round_ms or not variant.round_ms:
        return None
    return speedup(eager, variant)


def _require_default(result: ConfirmResult) -> None:
    baseline = result.get(DEFAULT)
    if baseline is None or not baseline.round_ms:
        raise TunerError(f"confirmation could not measure the default compile: "
                         f"{baseline.error if baseline else result.error}; rerun the search with --debug")


def best_configs(verdict: Verdict, *, workload: Workload, platform: Platform, study: StudyInfo,
                 user: str) -> list[BestConfig]:
    """One BestConfig per graph of the workload (the whole model shares one verdict)."""
    run = verdict.claim_run
    base = halves(run)[1].get(DEFAULT)
    stored = verdict.stored
    if stored is None and not verdict.eager:
        params, sp, latency = {}, Speedup(1.0, 1.0, 1.0, len(base.round_ms)), base.latency_ms
    else:
        params = {} if stored is None else stored.candidate.as_dict()
        sp = verdict.claim
        latency = halves(run)[1].get(EAGER if stored is None else stored.label).latency_ms
    unfrozen = verdict.unfrozen
    software = dict(platform.software)
    search = verdict.stored.search if verdict.stored is not None else None
    return [BestConfig(graph_key=g.key, platform_key=platform.key, params=params,
                       is_default=stored is None and not verdict.eager, eager=verdict.eager,
                       speedup=sp.median, ci_low=sp.low, ci_high=sp.high, rounds=sp.rounds,
                       latency_ms=latency, baseline_ms=base.latency_ms, workload_key=workload.key,
                       study_id=study.id, user=user, host=socket.gethostname(), tuner_version=__version__,
                       torch_version=software.get("torch", ""), triton_version=software.get("triton", ""),
                       created_at=dt.datetime.now(dt.timezone.utc),
                       unfrozen_params=None if unfrozen is None else unfrozen.candidate.as_dict(),
                       unfrozen_speedup=None if verdict.unfrozen_claim is None else verdict.unfrozen_claim.median,
                       unfrozen_eager=verdict.unfrozen_eager,
                       search_speedup=None if search is None else search.median)
            for g in workload.graphs]
