"""Searching the configs of a `tuner.autotune` kernel, given a way to measure one config.

Exhaustive when the configs that pass the constraint number at most `max_trials`; otherwise
Optuna's TPE sampler proposes configs (one categorical per name) until `max_trials` distinct
configs are measured. Proposals the constraint rejects, or already measured, cost no launch.
When the sampler keeps proposing those, untried configs picked at random fill the budget,
so a search always measures min(max_trials, number of configs) distinct configs.
Deterministic for a given seed (and deterministic measurements).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tuner.kernels.key import KernelSignature
from tuner.kernels.space import Config, Scalar
from tuner.keys import canonical_json
from tuner.trial import Measurement

DEFAULT_MAX_TRIALS = 64
_ATTEMPTS_PER_TRIAL = 20          # sampler proposals allowed per measured config


@dataclass(frozen=True)
class KernelTrial:
    """One measured config."""

    config: tuple[tuple[str, Scalar], ...]
    measurement: Measurement


@dataclass(frozen=True)
class KernelSearch:
    """What a search measured. `best` is None when every measured config failed."""

    strategy: str                       # "exhaustive", "optuna" or "sample"
    space_size: int                     # configs that pass the constraint
    trials: tuple[KernelTrial, ...]

    @property
    def best(self) -> KernelTrial | None:
        """The fastest config that ran (the first one measured, on a tie)."""
        ok = [t for t in self.trials if t.measurement.ok]
        return min(ok, key=lambda t: t.measurement.latency_ms or 0.0) if ok else None


@dataclass(frozen=True)
class KernelChoice:
    """The config a kernel launches with for one key, and where it came from."""

    kernel_key: str
    signature: KernelSignature
    config: tuple[tuple[str, Scalar], ...]
    origin: str                       # "database" (a hit), "search", or "only" (one config left by pruning)
    stored: bool                      # in the database now (a hit, or a search's winner kept)
    latency_ms: float | None
    configs_tried: int                # 0 on a hit
    search: KernelSearch | None = None

    def config_dict(self) -> Config:
        return dict(self.config)


def search_configs(configs: Sequence[Config], measure: Callable[[Config], Measurement], *,
                   max_trials: int = DEFAULT_MAX_TRIALS, seed: int = 0) -> KernelSearch:
    """Measure configs (each at most once) and return them all. `configs` must be non-empty
    and pass the constraint already; `measure` must not raise for a failing config."""
    if max_trials < 1:
        raise ValueError(f"max_trials must be at least 1, got {max_trials}")
    if len(configs) > max_trials and len({tuple(sorted(c)) for c in configs}) > 1:
        # configs naming different parameters (a triton.Config list): no common grid for TPE
        picked = random.Random(seed).sample(list(configs), max_trials)
        return KernelSearch(strategy="sample", space_size=len(configs),
                            trials=tuple(KernelTrial(tuple(c.items()), measure(c)) for c in picked))
    if len(configs) <= max_trials:
        trials = tuple(KernelTrial(tuple(c.items()), measure(c)) for c in configs)
        return KernelSearch(strategy="exhaustive", space_size=len(configs), trials=trials)
    return KernelSearch(strategy="optuna", space_size=len(configs),
                        trials=_optuna(configs, measure, max_trials=max_trials, seed=seed))


def _ident(config: Config) -> str:
    return canonical_json(sorted(config.items()))


def _optuna(configs: Sequence[Config], measure: Callable[[Config], Measurement], *,
            max_trials: int, seed: int) -> tuple[KernelTrial, ...]:
    import optuna

    names = list(configs[0])
    choices = {name: list(dict.fromkeys(c[name] for c in configs)) for name in names}
    valid = {_ident(c): c for c in configs}
    measured: dict[str, KernelTrial] = {}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)   # rejected proposals are not news
    try:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max_trials))
        study = optuna.create_study(direction="minimize", sampler=sampler)
        for _ in range(_ATTEMPTS_PER_TRIAL * max_trials):
            if len(measured) >= max_trials:
                break
            trial = study.ask()
            ident = _ident({n: trial.suggest_categorical(n, choices[n]) for n in names})
            if ident not in valid:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            if ident not in measured:
                measured[ident] = KernelTrial(tuple(valid[ident].items()), measure(valid[ident]))
            m = measured[ident].measurement
            if m.ok:
                study.tell(trial, m.latency_ms)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
    finally:
        optuna.logging.set_verbosity(verbosity)
    untried = [ident for ident in valid if ident not in measured]
    for ident in random.Random(seed).sample(untried, min(len(untried), max_trials - len(measured))):
        measured[ident] = KernelTrial(tuple(valid[ident].items()), measure(valid[ident]))
    return tuple(measured.values())
