"""The Optuna samplers `tuner search --sampler` offers, and what each one models on our spaces.

Our spaces are mostly bool and choice knobs (Optuna categoricals), some int and float ranges,
and conditional children that exist only while their parent has a given value (define-by-run).
Optuna's samplers model such spaces differently; what each really does here (Optuna 5):

- tpe (default): multivariate TPE over the knobs every trial so far had (the top-level ones,
  of every kind), and each child on its own; with constant_liar, so trials in flight at once
  are not proposed twice. It models every knob.
- gp: a Gaussian process (needs scipy and torch) over the knobs every trial so far had,
  categorical ones included; it accounts for trials in flight. The first 10 trials, and the
  children, come from TPE. Each proposal fits the process: about a second of CPU.
- cmaes: CMA-ES (with margin, so int and stepped float knobs keep moving) over the int and
  float knobs every trial had; bool and choice knobs and children come from TPE. On a space
  without int or float knobs it is TPE. When the set of numeric knobs shrinks between trials (a
  numeric child turned off), CMA-ES stops and TPE proposes everything from then on.
- qmc: a scrambled Sobol sequence over the knobs of trial 0 (Inductor's defaults: every
  top-level knob, categorical ones included, and children active by default); the other
  children come from TPE. It spreads trials evenly and learns nothing from the results.
- random: uniform, every knob.
- grid: every combination of every knob's values, children included, in an order shuffled by
  the seed. The driver measures combinations that compile identically once (a child's value
  while its parent turns it off changes nothing). Needs finite values: bools, choices, int
  ranges, float ranges with a step, and at most MAX_GRID_POINTS combinations.

TPE stands in for the samplers' own fall-back (Optuna's is random), deliberately and without
the warnings Optuna would log for each knob it falls back on. Every sampler is seeded: the
same seed and the same results give the same proposals (a seed of None draws one).
"""
from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Callable, Sequence

import optuna

from tuner.errors import SpaceError, UsageError
from tuner.search_spaces import SearchSpace

MAX_GRID_POINTS = 100_000     # Optuna's GridSampler lists and rescans every combination


def _tpe(seed: int | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def _gp(seed: int | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GPSampler(seed=seed, independent_sampler=_tpe(seed), warn_independent_sampling=False)


def _cmaes(seed: int | None) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.CmaEsSampler(seed=seed, independent_sampler=_tpe(seed), with_margin=True,
                                            warn_independent_sampling=False)


def _qmc(seed: int | None) -> optuna.samplers.BaseSampler:
    # Scrambled, or the seed would change nothing; QMCSampler is marked experimental since
    # Optuna 3.0 and says so on every construction.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed, independent_sampler=_tpe(seed),
                                          warn_independent_sampling=False, warn_asynchronous_seeding=False)


def _random(seed: int | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


SAMPLERS: dict[str, Callable[[int | None, SearchSpace], optuna.samplers.BaseSampler]] = {
    "tpe": lambda seed, space: _tpe(seed),
    "cmaes": lambda seed, space: _cmaes(seed),
    "gp": lambda seed, space: _gp(seed),
    "qmc": lambda seed, space: _qmc(seed),
    "random": lambda seed, space: _random(seed),
    "grid": lambda seed, space: AskTellGridSampler(grid_values(space), seed=seed),
}


def make_sampler(name: str, seed: int | None, space: SearchSpace) -> optuna.samplers.BaseSampler:
    """The Optuna sampler `name` (a key of SAMPLERS; SearchOptions has checked it) for `space`.

    Raises UsageError when the sampler cannot search `space` (see `check_sampler`).
    """
    return SAMPLERS[name](seed, space)


def check_sampler(name: str, space: SearchSpace) -> None:
    """Raise UsageError, naming the fix, when sampler `name` cannot search `space`; called
    before a study is written. Only grid can fail: a float range without a step, or more
    than MAX_GRID_POINTS combinations."""
    if name == "grid":
        grid_values(space)


def grid_values(space: SearchSpace) -> dict[str, list[Any]]:
    """Every knob's values, for optuna's GridSampler; UsageError when the grid is impossible."""
    try:
        grid = space.grid()       # int ranges stay lazy until the count is checked
    except SpaceError as exc:
        raise UsageError(f"--sampler grid needs finite values, but {exc}, or pick another --sampler") from None
    points = math.prod(len(values) for values in grid.values())
    if points > MAX_GRID_POINTS:
        largest = sorted(grid, key=lambda name: len(grid[name]), reverse=True)[:3]
        raise UsageError(f"--sampler grid: space {space.name!r} has {points:.3g} combinations, more than "
                         f"{MAX_GRID_POINTS} a grid can list (largest: "
                         f"{', '.join(f'{n} ({len(grid[n])})' for n in largest)}); pass a smaller "
                         f"--space file (fewer knobs, int and float ranges with a step) or another --sampler")
    return {name: list(values) for name, values in grid.items()}


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler as our driver uses it: ask and tell, never `study.optimize`.

    GridSampler calls `study.stop()` after its last combination, which raises outside
    `study.optimize`; here the driver ends the search instead, once every proposal is a
    candidate already measured. Past the end it proposes measured combinations again,
    without the warning GridSampler logs for each (the driver expects duplicates).
    """

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        grid_logger = logging.getLogger(optuna.samplers.GridSampler.__module__)
        was = grid_logger.disabled
        grid_logger.disabled = True
        try:
            super().before_trial(study, trial)
        finally:
            grid_logger.disabled = was

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: optuna.trial.TrialState, values: Sequence[float] | None) -> None:
        """Nothing: the driver, not `study.stop()`, ends a search whose grid is spent."""
