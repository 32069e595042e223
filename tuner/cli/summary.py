"""What `tuner search` prints once its trials are done: the summary table with the verdict
(or, after an interrupt, the trials so far); and the figures and labels that the live progress
(`tuner.cli.progress`), `tuner best` and `tuner trials` (`tuner.cli.results`) print too."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.cli.common import format_table
from tuner.search import Verdict
from tuner.storage import TrialRecord
from tuner.text import key_values
from tuner.trial import DEFAULT, EAGER, Measurement, Status, halves, measured_speedup

if TYPE_CHECKING:
    from tuner.search import SearchOutcome


def _fmt(value: float | None, spec: str = ".3f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def speedup_text(m: Measurement) -> str:
    """A trial's speedup over the defaults with its interval, "-" when it has none."""
    paired = measured_speedup(m)
    return "-" if paired is None else paired.text()


def pruned_text(count: int) -> str:
    """", N pruned" for a count of trials the pruner stopped early; "" for none (no pruning shown)."""
    return f", {count} pruned" if count else ""


def _short(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def record_label(record: TrialRecord) -> str:
    """A trial's non-default knobs as `k=v, k=v` sorted by name, or "defaults"."""
    return key_values(sorted(record.params.items())) or "defaults"


def summary_table(verdict: Verdict) -> str:
    """Eager, the default compile and each finalist: latency, the speedup the search saw, the
    confirmed speedup from held-out rounds, compile time; then what was stored and why."""
    rows = [("", "latency ms", "search saw", "confirmed (held-out rounds)", "compile s")]
    held_out = halves(verdict.selection)[1]
    search = {f.label: f.search for f in verdict.finalists}
    for variant in verdict.selection.variants:
        name = {EAGER: "eager", DEFAULT: "default compile"}.get(variant.label, variant.label)
        if variant.label == verdict.chosen:
            name += " *"
        sp = verdict.held_out(variant.label)
        if variant.label == DEFAULT:
            speed = "1.00x"
        elif sp is None:
            speed = f"{variant.status.value}: {variant.error or ''}"[:60]
        else:
            speed = sp.text()
        seen = search.get(variant.label)
        rows.append((name, _fmt(held_out.get(variant.label).latency_ms), seen.text() if seen else "-", speed,
                     _fmt(variant.compile_s, ".1f")))
    lines = [format_table(rows, rule=True), "* chosen on the other half of the rounds; the figures above played no "
             "part in the choice"]
    lines += ablation_lines(verdict) + [f"note: {n}" for n in verdict.notes] + verdict_lines(verdict)
    return "\n".join(lines)


def ablation_lines(verdict: Verdict) -> list[str]:
    """The backward elimination of the chosen config's knobs (`tuner.search.elimination`): each
    step's effects (how much slower the config is without each knob), what went, and why a knob stayed."""
    elimination = verdict.ablation
    if elimination is None:
        return []
    lines = []
    for n, step in enumerate(elimination.steps, start=1):
        if step.undone:
            lines.append(f"elimination step {n}: the config without the knobs dropped before was slower beyond the "
                         f"noise, so that step was undone")
            continue
        effects = ", ".join(f"{k} {sp.text() if sp else 'fails without it'}" for k, sp in step.effects)
        lines.append(f"elimination step {n} ({len(step.params)} knobs; how much slower without each): {effects}; "
                     f"dropped: {', '.join(step.dropped) or 'none'}")
    kept = [f"{k}={v} ({_effect_text(elimination.effect(k))})" for k, v in elimination.minimal.params]
    lines.append(f"minimal config: {', '.join(kept) or 'none'}; dropped {len(elimination.dropped)} knob(s)"
                 f"{': ' + ', '.join(elimination.dropped) if elimination.dropped else ''} ({elimination.stopped})")
    return lines


def _effect_text(sp: object) -> str:
    if sp is None:
        return "fails without it, or not timed alone"
    return f"{sp.text()} without it"


def verdict_lines(verdict: Verdict) -> list[str]:
    """What was stored, its held-out claim, the floor (never slower than eager or the default), the
    process stage's runtime knobs and claim in fresh processes, and how sure the verdict is."""
    lines = _compile_lines(verdict) + process_lines(verdict)
    if verdict.stability is not None:
        lines.append(stability_line(verdict.stability))
    return lines


def process_lines(verdict: Verdict) -> list[str]:
    """The process stage (`tuner.search.process_stage`): each runtime knob's values against the settings
    before them, what was kept, and the claim measured in fresh processes as a user runs the model."""
    process = verdict.process
    if process is None:
        return []
    lines = []
    for step in process.choice.steps:
        effects = ", ".join(f"{v} {sp.text() if sp else 'failed'}" for v, sp in step.effects)
        chosen = f"{step.chosen} kept" if step.chosen else "none cleared the noise"
        lines.append(f"{step.knob} (fresh processes, against the settings before it): {effects}; {chosen}")
    claim = process.claim
    if claim is not None and process.kept and claim.claim is not None:
        runtime = ", ".join(f"{k}={v}" for k, v in process.runtime) or "no runtime knob"
        lines.append(f"as a user runs it (fresh processes, `tuner run`): {runtime}, {claim.claim.text()} over the "
                     f"default compile in {claim.claim.rounds} held-out rounds ({_fmt(claim.default_ms)} -> "
                     f"{_fmt(claim.stored_ms)} ms): the figure stored")
    return lines


def _compile_lines(verdict: Verdict) -> list[str]:
    claim = verdict.claim
    if verdict.eager:
        return [f"stored: run uncompiled (eager), {claim.text()} over the default compile in "
                f"{claim.rounds} held-out rounds; lookup runs this model's graphs eagerly",
                "floor: the tuned model is not slower than the default compile or eager beyond the noise"]
    if verdict.stored is None:
        tried = [f"{f.label} {sp.text()}" for f in verdict.finalists if (sp := verdict.held_out(f.label))]
        eager = verdict.held_out(EAGER)
        eager_text = f"; eager runs at {eager.text()} of it" if eager else ""
        return [f"stored: Inductor's defaults ({_why_defaults(verdict, tried)})",
                f"floor: the default compile stays{eager_text}"]
    lines = [f"stored: {verdict.stored.candidate.label()} ({verdict.stored.label}), {claim.text()} over the default "
             f"compile in {claim.rounds} held-out rounds that played no part in the choice"]
    if verdict.stored.search is not None:
        lines.append(f"the search saw {verdict.stored.search.text()}; the gap is the noise of single trials")
    if verdict.unfrozen is not None:
        alt = ("eager (runs uncompiled)" if verdict.unfrozen_eager else verdict.unfrozen.candidate.label()
               if not verdict.unfrozen.candidate.is_default else "Inductor's defaults")
        figure = f", {verdict.unfrozen_claim.text()}" if verdict.unfrozen_claim else ""
        lines.append(f"freezing applies to inference (calls under torch.no_grad(), frozen at the first); a "
                     f"compile with grad enabled gets the best config measured without it: {alt}{figure}")
    eager = verdict.over_eager
    lines.append(f"floor: not slower than the default compile beyond the noise (gated on rounds apart from "
                 f"these), and {eager.text() if eager else '-'} over eager")
    return lines


def stability_line(share: float) -> str:
    """How sure a verdict is (`tuner.search.equivalence.stability`), in one line."""
    return (f"stability: {share:.0%} of bootstrap resamples of the held-out rounds have it fastest or within 1% "
            f"of the fastest")


def _why_defaults(verdict: Verdict, tried: list[str]) -> str:
    """Why the defaults stayed, beside the selection's held-out figures `tried`: "nothing cleared
    the noise" only when none of them did."""
    above = [f.label for f in verdict.finalists if (sp := verdict.held_out(f.label)) and sp.clears_noise]
    if not above:
        return f"nothing cleared the noise: {'; '.join(tried) or 'no finalist ran'}"
    shown = "; ".join(tried)
    # The note that kept the defaults, not whatever the process stage noted after it.
    why = [note for note in verdict.notes if note.endswith("so Inductor's defaults stay")]
    if why:
        return f"{', '.join(above)} cleared the noise in these rounds ({shown}), but {why[-1]}"
    return (f"{', '.join(above)} cleared the noise in these rounds ({shown}), but not in the other half of the "
            f"rounds, which chooses; a gain seen in one half only is not stored")


def interrupted_summary(outcome: SearchOutcome, *, total: int | None, confirming: bool = False,
                        shown: int = 5) -> str:
    """What an interrupted search measured: counts, then its `shown` fastest verified trials
    with their speedup over the defaults' trial (`total` None: a --budget search without --trials).
    Nothing was confirmed, so nothing is stored."""
    ok = [r for r in outcome.trials if r.measurement.ok and r.measurement.latency_ms is not None]
    of = f" of {total}" if total is not None else ""
    when = "during the confirmation" if confirming else f"after {len(outcome.trials)}{of} trials"
    pruned = sum(1 for r in outcome.trials if r.measurement.status is Status.PRUNED)
    head = (f"interrupted {when} ({len(ok)} ok, {len(outcome.trials) - len(ok) - pruned} failed{pruned_text(pruned)}, "
            f"{len(outcome.cancelled)} cancelled); nothing was confirmed or stored as best")
    if not ok:
        return head
    rows = [("#", "latency ms", "vs defaults (unconfirmed)", "params")]
    for r in sorted(ok, key=lambda r: r.measurement.objective)[:shown]:
        rows.append((str(r.number), _fmt(r.measurement.latency_ms), speedup_text(r.measurement),
                     _short(record_label(r))))
    return head + "\n" + format_table(rows)
