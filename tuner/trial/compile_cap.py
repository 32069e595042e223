"""The adaptive compile cap: how long a candidate's compile may run before it is stopped.

A config whose compile runs far past the others' (seen here: `cpp_wrapper` with max-autotune at
9-23 s where the rest took 2-4 s) should not cost minutes of a search. As Helion's autotuner bounds
a slow compile by the compile times seen so far, the driver computes a `CompileCap` from the
compile times of this search's correct trials (`adaptive_cap`), hands it to each trial in its
`TrialRequest`, and the trial process stops a candidate's first call once it passes the cap
(`tuner.measure.compile_cap`): the trial is a TIMEOUT whose error is `CompileCap.reason`. No cap
until MIN_COMPILES compiles were seen, and never below FLOOR_S, so an ordinary compile that is
merely slower than the fast ones is never stopped. The default compile, every trial's baseline,
is never capped; the per-trial deadline (`--timeout`) stays the outer bound. Standard library only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["CAP_PREFIX", "FACTOR", "FLOOR_S", "MIN_COMPILES", "CompileCap", "adaptive_cap"]

MIN_COMPILES = 5        # compiles seen before any cap: a p90 of fewer says little
QUANTILE = 0.9
FACTOR = 3.0            # a cap of 3x the p90: far past the others', not merely slower
FLOOR_S = 30.0          # never below: a first C++ compile on a loaded 2-core machine takes 10-20 s
CAP_PREFIX = "compile stopped at the adaptive cap"    # how a capped trial's error begins


@dataclass(frozen=True)
class CompileCap:
    """A cap of `seconds` on a candidate's compile (its first call), from `compiles` compile times
    whose p90 was `p90_s`, times `factor` (at least `floor_s`)."""

    seconds: float
    p90_s: float
    compiles: int
    factor: float = FACTOR
    floor_s: float = FLOOR_S

    def basis(self) -> str:
        """Where the cap comes from: `p90 of 12 compiles 13.7 s x 3[, at least 30 s]`."""
        floor = f", at least {self.floor_s:.3g} s" if self.seconds == self.floor_s else ""
        return f"p90 of {self.compiles} compiles {self.p90_s:.1f} s x {self.factor:g}{floor}"

    def reason(self) -> str:
        """The error of a trial the cap stopped; it begins with CAP_PREFIX."""
        return (f"{CAP_PREFIX} of {self.seconds:.3g} s ({self.basis()}); this config compiles far slower than "
                f"the others, so it was not measured")

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "p90_s": self.p90_s, "compiles": self.compiles, "factor": self.factor,
                "floor_s": self.floor_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CompileCap":
        return cls(seconds=float(data["seconds"]), p90_s=float(data["p90_s"]), compiles=int(data["compiles"]),
                   factor=float(data.get("factor", FACTOR)), floor_s=float(data.get("floor_s", FLOOR_S)))


def adaptive_cap(compile_times: Iterable[float], *, factor: float = FACTOR, floor_s: float = FLOOR_S,
                 min_compiles: int = MIN_COMPILES) -> CompileCap | None:
    """The cap after these compile times (seconds of correct candidates' first calls): the p90
    (nearest rank) times `factor`, at least `floor_s`; None before `min_compiles` times."""
    times = sorted(t for t in compile_times if t is not None and math.isfinite(t) and t >= 0)
    if len(times) < max(1, min_compiles):
        return None
    p90 = times[max(0, math.ceil(QUANTILE * len(times)) - 1)]
    return CompileCap(seconds=max(floor_s, p90 * factor), p90_s=p90, compiles=len(times), factor=factor,
                      floor_s=floor_s)
