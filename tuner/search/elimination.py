"""Minimal means minimal: backward elimination of a chosen config's knobs, each step re-confirmed.

A config chosen from a search may carry knobs that do nothing: the sampler proposed them beside
the one that mattered. `eliminate` drops them in steps, each a confirmation run of its own
(`ConfirmRequest.stage` "ablation-N"): the config now, and it without each of its knobs. A knob
whose removal does not cost beyond the noise (the config's speedup over the config without it,
an interval that still reaches 1) is droppable; a knob without which the config fails to compile
or run stays. Every droppable knob goes at once, and the next step times the smaller config beside
the one before it: if the smaller one is slower beyond the noise (the knobs mattered together,
not alone), the step is undone and only the knob that mattered least goes. It ends when no knob
can be dropped without a loss beyond the noise, or one knob is left (it was chosen for clearing
the noise against the default compile), or after MAX_STEPS runs (said in the result).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tuner.trial import Candidate, ConfirmResult, Speedup, speedup

__all__ = ["MAX_STEPS", "Elimination", "Step", "eliminate"]

MAX_STEPS = 6
CURRENT, BEFORE = "chosen", "before this step"

Confirm = Callable[[list[tuple[str, Candidate | None]], str], ConfirmResult]


@dataclass(frozen=True)
class Step:
    """One run: the config timed (`params`), each knob's effect (how much faster the config is than
    the config without it; None: without it, it failed), the knobs dropped after it, and whether the
    step before was undone (its config was slower than the one before beyond the noise)."""

    params: tuple[tuple[str, Any], ...]
    effects: tuple[tuple[str, Speedup | None], ...]
    dropped: tuple[str, ...]
    undone: bool = False
    result: ConfirmResult | None = None


@dataclass(frozen=True)
class Elimination:
    """The steps, the minimal config they arrived at, and why they stopped."""

    chosen: Candidate
    minimal: Candidate
    steps: tuple[Step, ...]
    stopped: str

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(k for k in sorted(self.chosen.as_dict()) if k not in self.minimal.as_dict())

    def effect(self, knob: str) -> Speedup | None:
        """A kept knob's effect in the last step that timed it (why it stayed)."""
        for step in reversed(self.steps):
            found = dict(step.effects)
            if knob in found:
                return found[knob]
        return None


def eliminate(confirm: Confirm, chosen: Candidate, *, confidence: float = 0.95, max_steps: int = MAX_STEPS) -> Elimination:
    """The module docstring's backward elimination of `chosen` (two or more knobs), through `confirm`."""
    current, before = chosen.as_dict(), None
    last: dict[str, Speedup | None] = {}        # the effects of the knobs the step under test dropped
    single = False                              # the step under test dropped one knob only
    steps: list[Step] = []
    for n in range(1, max_steps + 1):
        variants = [(CURRENT, Candidate.from_dict(current))]
        variants += [(f"without {k}", Candidate.from_dict(_without(current, {k}))) for k in sorted(current)]
        if before is not None:
            variants.append((BEFORE, Candidate.from_dict(before)))
        result = confirm(variants, f"ablation-{n}")
        base = result.get(CURRENT)
        if base is None or not base.round_ms:
            return _done(chosen, before or current, steps, f"step {n} could not time its config; the one before stays")
        if before is not None and _slower(result, confidence=confidence):
            steps.append(Step(tuple(sorted(current.items())), (), (), undone=True, result=result))
            if single:
                return _done(chosen, before, steps, "dropping the last knob dropped cost beyond the noise")
            least = min(last, key=lambda k: last[k].median)     # of those dropped together: the one that mattered least
            current, last, single = _without(before, {least}), {least: last[least]}, True
            continue
        effects = {k: _effect(result, k, confidence) for k in sorted(current)}
        droppable = [k for k, sp in effects.items() if sp is not None and not sp.clears_noise]
        if len(droppable) == len(current):      # keep the one that mattered most: the config cleared the noise
            droppable.remove(max(droppable, key=lambda k: effects[k].median))
        steps.append(Step(tuple(sorted(current.items())), tuple(effects.items()), tuple(droppable), result=result))
        if not droppable:
            return _done(chosen, current, steps, "no knob can be dropped without a loss beyond the noise")
        last, single = {k: effects[k] for k in droppable}, len(droppable) == 1
        before, current = current, _without(current, set(droppable))
    return _done(chosen, before or current, steps,
                 f"stopped after {max_steps} runs; the last config confirmed is kept")


def _done(chosen: Candidate, params: dict[str, Any], steps: list[Step], why: str) -> Elimination:
    return Elimination(chosen, Candidate.from_dict(params), tuple(steps), why)


def _without(params: dict[str, Any], knobs: set[str]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in knobs}


def _effect(result: ConfirmResult, knob: str, confidence: float) -> Speedup | None:
    """How much faster the config is than without `knob` (None: without it, it failed)."""
    without, base = result.get(f"without {knob}"), result.get(CURRENT)
    if without is None or not without.round_ms:
        return None
    return speedup(without, base, confidence=confidence)


def _slower(result: ConfirmResult, *, confidence: float) -> bool:
    """Whether the config now is slower than the one before this step, beyond the noise."""
    before, base = result.get(BEFORE), result.get(CURRENT)
    if before is None or not before.round_ms:
        return False
    sp = speedup(before, base, confidence=confidence)
    return sp is not None and sp.slower_beyond_noise
