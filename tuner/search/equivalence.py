"""One question, one answer: among configs that cannot be told apart, the simplest; and how sure.

Two searches of one model may find different winners that run equally fast: which one tops a
noisy run is chance. So the choice is the one-standard-error rule of CART, on measured intervals:
among the candidates that clear the noise against the default compile, the best is the one with
the highest median speedup; every other candidate whose own interval against the best still
reaches 1 (it cannot be told apart from the best) ties with it; and of the best and its ties the
simplest is chosen, by `simplicity`:

1. Inductor's defaults (nothing to apply);
2. eager (nothing compiled);
3. a mode alone (`mode=max-autotune-no-cudagraphs`);
4. fewer knobs before more; among as many, the higher median.

`stability` says how sure a stored verdict is: the share of bootstrap resamples of the claim's
held-out rounds in which the stored variant is the fastest of those measured beside it, or within
TIE of the fastest (a gap under 1% is below the noise within one process on this machine).
"""
from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tuner.trial import DEFAULT, EAGER, ConfirmResult, Speedup, speedup

__all__ = ["BOOTSTRAP", "TIE", "Choice", "choose_simplest", "simplicity", "stability"]

TIE = 0.01              # within 1% of the fastest counts as tied in a resample
BOOTSTRAP = 1000        # resamples behind a stability figure


def simplicity(label: str, params: Mapping[str, Any] | None) -> tuple[int, int]:
    """The order `choose_simplest` prefers (lower is simpler); `params` the label's knobs (None: eager)."""
    if label == DEFAULT:
        return (0, 0)
    if params is None or label == EAGER:
        return (1, 0)
    if set(params) == {"mode"}:
        return (2, 1)
    return (3, len(params))


@dataclass(frozen=True)
class Choice:
    """What `choose_simplest` chose: `chosen` (DEFAULT when nothing cleared the noise), the `best`
    by median, the candidates `tied` with it, and those of them `passed_over` for a simpler one."""

    chosen: str
    best: str | None = None
    tied: tuple[str, ...] = ()
    passed_over: tuple[str, ...] = ()

    def text(self) -> str:
        """One line for the summary ("" when nothing tied)."""
        if not self.tied:
            return ""
        others = ", ".join(self.passed_over) or "none"
        return (f"{len(self.tied) + 1} configs could not be told apart from the fastest ({self.best}); chose "
                f"{self.chosen}, the simplest (then the higher median); passed over: {others}")


def choose_simplest(result: ConfirmResult, labels: Sequence[str], params: Mapping[str, Mapping[str, Any] | None], *,
                    confidence: float = 0.95) -> Choice:
    """Among `labels` (variants of `result`) that clear the noise against DEFAULT, the simplest of the best
    and those that cannot be told apart from it (module docstring); `params[label]` their knobs (None: eager)."""
    base = result.get(DEFAULT)
    if base is None or not base.round_ms:
        return Choice(DEFAULT)
    over_default = {label: _speedup(result, DEFAULT, label, confidence) for label in labels}
    winners = [label for label, sp in over_default.items() if sp is not None and sp.clears_noise]
    if not winners:
        return Choice(DEFAULT)
    best = max(winners, key=lambda label: over_default[label].median)
    tied = [w for w in winners if w != best and not _apart(result, best, w, confidence)]
    pool = [best, *tied]
    chosen = min(pool, key=lambda label: (simplicity(label, params.get(label)), -over_default[label].median))
    return Choice(chosen, best, tuple(tied), tuple(label for label in pool if label != chosen))


def _speedup(result: ConfirmResult, baseline: str, label: str, confidence: float) -> Speedup | None:
    base, variant = result.get(baseline), result.get(label)
    if base is None or variant is None or not base.round_ms or not variant.round_ms:
        return None
    return speedup(base, variant, confidence=confidence)


def _apart(result: ConfirmResult, best: str, other: str, confidence: float) -> bool:
    """Whether `best` is faster than `other` beyond the noise (their paired interval lies above 1)."""
    sp = _speedup(result, other, best, confidence)
    return sp is not None and sp.clears_noise


def stability(result: ConfirmResult, stored: str, *, seed: int = 0, resamples: int = BOOTSTRAP) -> float | None:
    """The share of bootstrap resamples of `result`'s rounds (the claim's held-out half) in which `stored`
    runs fastest or within TIE of the fastest of the variants measured beside it, each variant's figure
    the median of its per-round ratios to DEFAULT; None when `stored` or DEFAULT has no rounds."""
    base = result.get(DEFAULT)
    ratios = {v.label: [b / x for b, x in zip(base.round_ms, v.round_ms) if x > 0]
              for v in result.variants if base is not None and v.round_ms}
    if stored not in ratios or not ratios[stored]:
        return None
    count = min(len(r) for r in ratios.values())
    rng = random.Random(f"{seed}/stability")
    held = 0
    for _ in range(resamples):
        picks = [rng.randrange(count) for _ in range(count)]
        medians = {label: statistics.median(r[i] for i in picks) for label, r in ratios.items()}
        held += medians[stored] >= max(medians.values()) * (1 - TIE)
    return held / resamples
