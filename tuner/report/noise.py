"""The noise every claim of the report is read against: the default compile timed against itself.

A search's trial of Inductor's defaults is paired with the default compile, the same config on
both sides, so its paired speedup and interval say how far this model's measurements move on
this machine with nothing changed: the noise floor. The history draws it as a band around 1.0;
when every ok trial lies inside it, knob importances would rank noise, so the page says so
instead; and a kept "defaults" verdict is explained against it (`advice` says what to try next).
Pure functions over stored records, tested without matplotlib or a browser.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.report.data import seed_label
from tuner.text import key_values

if TYPE_CHECKING:
    from tuner.storage import StudyInfo, TrialRecord

CLOSEST = 3             # candidates named in a "defaults kept" explanation


@dataclass(frozen=True)
class NoiseFloor:
    """The defaults' trial `number`: the default compile against itself, `speedup` [`low`, `high`].

    `half_width` is how far from 1.0 that reading reaches (0.04: measurements move by about ±4%
    with nothing changed); the band [1 - half_width, 1 + half_width] is what a gain must clear.
    `baseline_ms` is the default compile's latency per call in that trial, when stored.
    """

    number: int
    speedup: float
    low: float
    high: float
    baseline_ms: float | None = None

    @property
    def half_width(self) -> float:
        return max(abs(self.low - 1.0), abs(self.high - 1.0), abs(self.speedup - 1.0))

    @property
    def band(self) -> tuple[float, float]:
        return 1.0 - self.half_width, 1.0 + self.half_width

    def describe(self) -> str:
        """One clause: the reading and what it means, e.g. "0.98x [0.96, 1.04] (trial 0), about ±4%"."""
        return (f"{self.speedup:.2f}x [{self.low:.2f}, {self.high:.2f}] (trial {self.number}), "
                f"about ±{self.half_width:.0%}")


def noise_floor(trials: tuple[TrialRecord, ...]) -> NoiseFloor | None:
    """The first ok trial of Inductor's defaults that stored a paired interval; None without one
    (an older or imported study, or a defaults trial that failed)."""
    for r in sorted(trials, key=lambda t: t.number):
        m = r.measurement
        if (m.ok and seed_label(r.params) == "defaults" and m.speedup is not None
                and m.speedup_low is not None and m.speedup_high is not None):
            return NoiseFloor(r.number, m.speedup, m.speedup_low, m.speedup_high, m.baseline_ms)
    return None


def _candidates(trials: tuple[TrialRecord, ...]) -> list[TrialRecord]:
    """The ok trials paired with the defaults, the defaults' own trials left out."""
    return [r for r in trials if r.measurement.ok and r.measurement.speedup is not None
            and seed_label(r.params) != "defaults"]


def within_noise(trials: tuple[TrialRecord, ...], floor: NoiseFloor | None) -> bool:
    """True when no ok candidate stands out of the noise, so their spread says nothing about knobs.

    With a floor: every candidate's speedup lies inside its band. Without one: every candidate
    stored an interval and each includes 1.0. False when there is no candidate to judge.
    """
    found = _candidates(trials)
    if not found:
        return False
    if floor is not None:
        low, high = floor.band
        return all(low <= r.measurement.speedup <= high for r in found)
    return all(r.measurement.speedup_low is not None and r.measurement.speedup_high is not None
               and r.measurement.speedup_low <= 1.0 <= r.measurement.speedup_high for r in found)


def within_noise_note(floor: NoiseFloor | None) -> str:
    """The one line the importance section shows instead of ranking knobs when `within_noise`."""
    if floor is None:
        return ("every ok trial's interval includes 1.0 (none differs from the default compile beyond its "
                "own noise), so no knob can be told to matter from these trials; knobs are not ranked")
    low, high = floor.band
    return (f"every ok trial lies within the noise floor, the default compile against itself "
            f"({floor.describe()}: {low:.2f}x to {high:.2f}x), so no knob can be told to matter from "
            f"these trials; knobs are not ranked")


@dataclass(frozen=True)
class Candidate:
    """One of the closest candidates: its trial, paired speedup and interval, and its knobs."""

    number: int
    speedup: float
    low: float | None
    high: float | None
    config: str


def closest(trials: tuple[TrialRecord, ...], n: int = CLOSEST) -> list[Candidate]:
    """The `n` ok candidates with the highest paired speedup, highest first."""
    ranked = sorted(_candidates(trials), key=lambda r: (-r.measurement.speedup, r.number))[:n]
    return [Candidate(r.number, r.measurement.speedup, r.measurement.speedup_low, r.measurement.speedup_high,
                      key_values(sorted(r.params.items())) or "defaults") for r in ranked]


def advice(*, study: StudyInfo | None, trials: int, rounds: int, platform: str,
           baseline_ms: float | None) -> list[str]:
    """What to try next after "defaults kept", most likely to help first; each line names the flag."""
    asked = study.trials_requested if study is not None else trials
    # 0 asked: a --budget search without --trials, which measured what fitted
    of = f" of the {asked} it asked for" if asked else " that fitted in its --budget"
    lines = [f"more trials: this search measured {trials}{of}, a small part of the space; run it with "
             f"--trials {max(30, 2 * (asked or trials))} (--resume continues this study)",
             f"more rounds: the verdict rests on {rounds} paired rounds; --rounds {max(40, 2 * rounds)} "
             f"narrows the interval, so a smaller gain can clear the noise"]
    per_call = f" at {baseline_ms:.3f} ms per call," if baseline_ms is not None else ""
    lines.append(f"a larger batch (get_inputs):{per_call} fixed per-call overhead weighs heavily, and "
                 f"Inductor's knobs change the compute, not that overhead")
    if "(cpu)" in platform:
        lines.append("a GPU: on CPU most of Inductor's knobs move latency by a few percent; max-autotune, "
                     "Triton tile configs and CUDA graphs have more room on a GPU")
    return lines
