"""`SearchSpace`: the knobs of one search, turned into Optuna suggestions and Candidates.

Built by `loader.load_space` from the literal tables in `cpu.py` / `cuda.py` or from a user's
JSON space file (parsed by `spacefile.py`), filtered to what the installed torch has and
the workload uses.

Semantics shared by every method: a knob at its default means "leave Inductor alone",
so it never overrides what the chosen mode preset sets. A child knob is active only
while its parent's effective value (the mode's setting, overridden by the parent knob
when that is not at its default) equals the value named in `Knob.parent`.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Mapping, Sequence

from tuner.errors import SpaceError
from tuner.keys import canonical_json
from tuner.search_spaces.knobs import Knob, mode_options, same_value
from tuner.trial import Candidate

SPACE_FORMAT = 1
# The most points `tuner record-space` measures (about an hour of trials on a small CPU model):
# beyond it a search is the tool. Here, not in tuner.search.recording, so the CLI's help can say it
# without importing the search.
MAX_RECORDED_POINTS = 256


@dataclass(frozen=True)
class SearchSpace:
    """The knobs one search explores, already checked against the installed torch.

    `notices` say which knobs were skipped or adjusted and why (one line each).
    Knob order is define-by-run order: `mode` first, parents before their children.
    """

    name: str
    device: str
    knobs: tuple[Knob, ...]
    notices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for knob in self.knobs:
            if knob.name in seen:
                raise ValueError(f"space {self.name!r} lists knob {knob.name!r} twice")
            if knob.parent is not None and knob.parent[0] not in seen:
                raise ValueError(f"space {self.name!r}: knob {knob.name!r} comes before its parent "
                                 f"{knob.parent[0]!r} or the parent is missing")
            if knob.name == "mode" and seen:
                raise ValueError(f"space {self.name!r}: 'mode' must be the first knob")
            seen.add(knob.name)

    # -- lookups -------------------------------------------------------------

    @cached_property
    def _by_name(self) -> dict[str, Knob]:
        return {k.name: k for k in self.knobs}

    @cached_property
    def _mode_default(self) -> str:
        knob = self._by_name.get("mode")
        return knob.default if knob is not None else "default"

    def knob(self, name: str) -> Knob:
        """The knob called `name`; SpaceError when this space does not have it."""
        try:
            return self._by_name[name]
        except KeyError:
            raise SpaceError(f"knob {name!r} is not in search space {self.name!r}; "
                             f"its knobs are: {', '.join(self._by_name)}") from None

    def _mode_of(self, values: Mapping[str, Any]) -> Mapping[str, Any]:
        return mode_options(values.get("mode", self._mode_default))

    def _effective(self, name: str, values: Mapping[str, Any]) -> Any:
        knob = self._by_name[name]
        if name in values and not same_value(values[name], knob.default):
            return values[name]
        if name == "mode":
            return knob.default
        return self._mode_of(values).get(name, knob.default)

    def _active(self, knob: Knob, values: Mapping[str, Any]) -> bool:
        if knob.parent is None:
            return True
        parent, wanted = knob.parent
        return parent in values and same_value(self._effective(parent, values), wanted)

    def _walk(self, pick) -> dict[str, Any]:
        """Visit active knobs in order; `pick(knob)` gives each one's value."""
        values: dict[str, Any] = {}
        for knob in self.knobs:
            if self._active(knob, values):
                values[knob.name] = pick(knob)
        return values

    def _check_values(self, params: Mapping[str, Any], what: str) -> None:
        for name in sorted(params):
            problem = self.knob(name).value_problem(params[name])
            if problem is not None:
                raise SpaceError(f"{what} for space {self.name!r}: {name}: {problem}")

    # -- Optuna ----------------------------------------------------------------

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Define-by-run: suggest every active knob on `trial` (an optuna BaseTrial).

        Children are suggested only when their parent's effective value matches.
        Returns the full Optuna param dict of this trial (inactive children absent);
        floats are rounded to 12 significant digits, so they may differ from
        `trial.params` in the last bits.
        """
        return self._walk(lambda knob: _suggest_one(trial, knob))

    def default_params(self) -> dict[str, Any]:
        """Every top-level knob at its default; children only where active by default."""
        return self._walk(lambda knob: knob.default)

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The full Optuna param dict for `params`: given values, defaults for the rest of the
        active knobs. Knobs given but inactive are dropped (they would not be suggested)."""
        self._check_values(params, "params")
        return self._walk(lambda knob: params.get(knob.name, knob.default))

    def seeds(self) -> list[dict[str, Any]]:
        """Params to enqueue first (study.enqueue_trial), in order.

        Trial 0 is Inductor's defaults, then each non-default mode preset with every
        other knob at its default, then freezing=True when the space has it, then each
        precision other than fp32 (`--precision`). Seeds that would compile identically are
        listed once.
        """
        wanted = [self.default_params()]
        mode = self._by_name.get("mode")
        if mode is not None:
            wanted += [self.complete({"mode": m}) for m in mode.choices if not same_value(m, mode.default)]
        if "freezing" in self._by_name:
            wanted.append(self.complete({"freezing": True}))
        precision = self._by_name.get("precision")
        if precision is not None:
            wanted += [self.complete({"precision": p}) for p in precision.choices if p != precision.default]
        seeds, keys = [], set()
        for params in wanted:
            key = self.candidate(params).key
            if key not in keys:
                keys.add(key)
                seeds.append(params)
        return seeds

    def candidate(self, params: Mapping[str, Any]) -> Candidate:
        """The Candidate for an Optuna param dict: only active, non-default knobs.

        A knob whose value equals what the chosen mode already sets is dropped too, so
        param dicts that compile identically share one `Candidate.key`.
        Raises SpaceError for a knob this space lacks or a value outside its domain.
        """
        self._check_values(params, "params")
        values = self._walk(lambda knob: params.get(knob.name, knob.default))
        mode_sets = self._mode_of(values)
        kept = {}
        for name, value in values.items():
            knob = self._by_name[name]
            if same_value(value, knob.default):
                continue
            if name != "mode" and name in mode_sets and same_value(mode_sets[name], value):
                continue
            kept[name] = value
        return Candidate.from_dict(kept)

    def grid(self) -> dict[str, Sequence[Any]]:
        """Every value the search can propose, per knob (children included); SpaceError for a
        float range without a step, which has no finite set of values."""
        return {knob.name: _grid(knob) for knob in self.knobs}

    def points(self, limit: int) -> list[Candidate]:
        """Every distinct candidate of this space, the defaults first, deduplicated by
        Candidate.key (a child knob varies only where its parent makes it active): at most
        `limit + 1` of them, so a longer list than `limit` says the space is larger than that.
        Raises SpaceError for a float knob without a step, which has no finite set of points."""
        grids = self.grid()
        found = {}
        for values in itertools.chain([self.default_params()], self._assignments(0, {}, grids)):
            candidate = self.candidate(values)
            found.setdefault(candidate.key, candidate)
            if len(found) > limit:
                break
        return list(found.values())

    def _assignments(self, index: int, values: dict[str, Any],
                     grids: Mapping[str, list[Any]]) -> Iterator[dict[str, Any]]:
        """Each full Optuna param dict that extends `values` over the knobs from `index` on."""
        if index == len(self.knobs):
            yield dict(values)
            return
        knob = self.knobs[index]
        if not self._active(knob, values):
            yield from self._assignments(index + 1, values, grids)
            return
        for value in grids[knob.name]:
            values[knob.name] = value
            yield from self._assignments(index + 1, values, grids)
        del values[knob.name]

    def distributions(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Optuna distributions by knob name: of every knob, or only of the keys of `params`
        (what `optuna.trial.create_trial(params=..., distributions=...)` needs)."""
        names = list(self._by_name) if params is None else [self.knob(n).name for n in params]
        return {name: knob_distribution(self._by_name[name]) for name in names}

    def replay_params(self, candidate_params: Mapping[str, Any]) -> dict[str, Any]:
        """Fill a stored Candidate's params back to a full, consistent Optuna param dict.

        Use with `create_trial(params=p, distributions=space.distributions(p), ...)` and
        `study.add_trial`. Raises SpaceError when a stored knob is not in this space or
        not active here (the trial came from another space; skip it).
        """
        self._check_values(candidate_params, "stored params")
        full = self.complete(candidate_params)
        lost = sorted(set(candidate_params) - set(full))
        if lost:
            raise SpaceError(f"stored params set {', '.join(lost)}, inactive in space {self.name!r} "
                             "under the stored parent values; the trial belongs to another space")
        return full

    # -- identity --------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"format": SPACE_FORMAT, "name": self.name, "device": self.device,
                "knobs": [k.to_json() for k in self.knobs], "notices": list(self.notices)}

    @cached_property
    def hash(self) -> str:
        """Stable across processes and machines: what the space proposes, not its notices."""
        body = {"format": SPACE_FORMAT, "name": self.name, "device": self.device,
                "knobs": [k.identity() for k in self.knobs]}
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()[:24]


def _suggest_one(trial: Any, knob: Knob) -> Any:
    if knob.kind == "bool":
        return trial.suggest_categorical(knob.name, (False, True))
    if knob.kind == "choice":
        return trial.suggest_categorical(knob.name, knob.choices)
    if knob.kind == "int":
        return trial.suggest_int(knob.name, int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log)
    value = trial.suggest_float(knob.name, float(knob.low), float(knob.high), step=knob.step, log=knob.log)
    # Optuna's stepped floats carry binary noise (0.30000000000000004); keys should not.
    return float(f"{value:.12g}")


def _grid(knob: Knob) -> Sequence[Any]:
    """Every value the search can propose for `knob` (what `_suggest_one` can return); an int
    range stays a lazy `range`, so a huge one costs nothing until it is walked."""
    if knob.kind == "bool":
        return [False, True]
    if knob.kind == "choice":
        return list(knob.choices)
    if knob.kind == "float" and knob.step is None:
        raise SpaceError(f"knob {knob.name!r} is a continuous float range [{knob.low}, {knob.high}] with no "
                         f"finite set of values; give it a \"step\" in the space file")
    step = knob.step or 1
    count = int((knob.high - knob.low) / step + 1e-9) + 1
    if knob.kind == "int":
        return range(int(knob.low), int(knob.low) + count * int(step), int(step))
    # Rounded like the search's own suggestions, so listed values and stored params agree.
    return [float(f"{knob.low + i * step:.12g}") for i in range(count)]


def knob_distribution(knob: Knob) -> Any:
    """The Optuna distribution a search suggests `knob` from."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if knob.kind == "bool":
        return CategoricalDistribution((False, True))
    if knob.kind == "choice":
        return CategoricalDistribution(knob.choices)
    if knob.kind == "int":
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log, step=int(knob.step or 1))
    return FloatDistribution(float(knob.low), float(knob.high), log=knob.log, step=knob.step)
