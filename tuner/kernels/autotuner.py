"""`tuner.autotune`: a drop-in replacement for `triton.autotune` that keeps kernel tile
configs in tuner's database.

    @tuner.autotune(space={"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "num_warps": [4, 8]},
                    key=["M", "N"], constraint=lambda c: c["BLOCK_M"] * c["BLOCK_N"] <= 8192)
    @triton.jit
    def kernel(..., M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr): ...

    kernel[grid](*args)          # grid may be a callable of the chosen META, as with Triton

At the first launch per (key arguments, dtypes) in a process: the database is read (see
`tuner.kernels.database`). A hit launches the stored config at once, benchmarking nothing. A miss
enumerates the space (the constraint runs before any launch), searches it
(`tuner.kernels.search`: exhaustive when small, Optuna under `max_trials` otherwise), times
each config with the timer (`tuner.kernels.bench`), stores the winner with its timings, and
launches it. Later launches with the same key reuse the choice without touching the database.
Inside `untuned_launches()` (the gate's float64 reference run), a key not chosen yet launches
its space's first config instead: nothing is read, timed, stored or remembered.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError, UsageError
from tuner.kernels.bench import ArgHooks, DoBenchTimer, Timer, WallClockTimer, benchmark
from tuner.kernels.database import KernelDatabase, warn_once
from tuner.kernels.discovery import note_launch
from tuner.kernels.key import KernelSignature, kernel_key, python_function, signature_of, source_hash
from tuner.kernels.search import DEFAULT_MAX_TRIALS, KernelChoice, KernelSearch, KernelTrial, search_configs
from tuner.kernels.space import LAUNCH_OPTIONS, Config, Constraint, KernelSpace, Scalar, space_hash
from tuner.keys import Platform

if TYPE_CHECKING:
    from tuner.storage import KernelConfig

__all__ = ["AutotunedKernel", "KernelChoice", "autotune", "untuned_launches"]

_untuned = [0]      # open untuned_launches() contexts, process-wide
_untuned_lock = threading.Lock()


@contextmanager
def untuned_launches() -> Iterator[None]:
    """While open, a launch whose key has no choice yet runs the space's first config, and
    chooses nothing: for runs whose dtypes or shapes the user never launches (the gate's
    float64 reference), which must not search, store or log a config. Process-wide."""
    with _untuned_lock:
        _untuned[0] += 1
    try:
        yield
    finally:
        with _untuned_lock:
            _untuned[0] -= 1


def autotune(space: Mapping[str, Sequence[Scalar]], key: Sequence[str], *,
             constraint: Constraint | None = None, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, max_trials: int = DEFAULT_MAX_TRIALS,
             timer: Timer | None = None, db: str | None = None) -> Callable[[Any], "AutotunedKernel"]:
    """Decorate a `@triton.jit` kernel so it launches with the best config of `space`.

    `space` maps constexpr parameters (and Triton launch options: num_warps, num_stages,
    num_ctas, maxnreg) to value lists; `constraint(config_dict) -> bool` prunes combinations
    before any launch. `key` names the arguments whose values (with every tensor argument's
    dtype) select a config. `reset_to_zero` arguments are zeroed before each benchmark launch
    and once before the real launch; `restore_value` arguments are restored after each
    benchmark launch. `max_trials` bounds the configs measured per key. `timer` times one
    config (default: `triton.testing.do_bench` on a GPU; wall clock, which means nothing,
    under `TRITON_INTERPRET=1`). `db` is a database URL (default: TUNER_DB, or the per-user
    file). Raises UsageError, naming the fix, for a space or argument name that does not fit.
    """
    if max_trials < 1:
        raise UsageError(f"max_trials must be at least 1, got {max_trials}")

    def decorator(fn: Any) -> AutotunedKernel:
        arg_names = getattr(fn, "arg_names", None)
        if arg_names is None or not hasattr(fn, "run") or python_function(fn) is None:
            raise UsageError(f"tuner.autotune decorates Triton kernels; put it above @triton.jit "
                             f"(got {fn!r})")
        for what, names in (("key", key), ("reset_to_zero", reset_to_zero or ()),
                            ("restore_value", restore_value or ())):
            unknown = [n for n in names if n not in arg_names]
            if unknown or isinstance(names, str):
                raise UsageError(f"{what} must list parameters of the kernel ({', '.join(arg_names)}); "
                                 f"got {names!r}")
        return AutotunedKernel(fn, KernelSpace.declare(space, arg_names, constraint), key=tuple(key),
                               hooks=ArgHooks(tuple(reset_to_zero or ()), tuple(restore_value or ())),
                               max_trials=max_trials, timer=timer, db=KernelDatabase(db))

    return decorator


class AutotunedKernel:
    """A Triton kernel whose config comes from tuner's database, or from a search.

    Launch it like any Triton kernel: `kernel[grid](*args, **kwargs)`. Thread-safe: a
    second thread launching a key under search waits for that search.
    """

    def __init__(self, fn: Any, space: KernelSpace, *, key: tuple[str, ...], hooks: ArgHooks,
                 max_trials: int, timer: Timer | None, db: KernelDatabase) -> None:
        self.fn = fn
        self.arg_names = list(fn.arg_names)
        self.space = space
        self.key = key
        self._hooks, self._max_trials, self._timer, self._db = hooks, max_trials, timer, db
        self._lock = threading.RLock()
        self._configs: tuple[Config, ...] | None = None
        self._source: str | None = None
        self._choices: dict[tuple[KernelSignature, str], KernelChoice] = {}   # by (.., device)
        self._interpreter: bool | None = None
        self.best_config: Config | None = None      # the config of the latest launch
        self.__name__ = python_function(fn).__name__
        import torch

        # Opaque to Dynamo: a torch.compile'd model graph-breaks around the launch, which runs
        # as in eager (Dynamo cannot trace the lock, the search, or Triton's interpreter).
        self._launch = torch.compiler.disable(self.run, recursive=True)

    def __repr__(self) -> str:
        return f"<tuner.autotune kernel {self.__name__}: {self.space.size} combinations>"

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self._launch(*args, grid=grid, warmup=False, **kwargs)

    def configs(self) -> tuple[Config, ...]:
        """The configs that pass the constraint (enumerated once, before any launch)."""
        with self._lock:
            if self._configs is None:
                self._configs = self.space.configs()
            return self._configs

    def triton_configs(self) -> list[Any]:
        """The same configs as `triton.Config` objects, for `triton.autotune(configs=...)`."""
        import triton

        return [triton.Config({k: v for k, v in c.items() if k not in LAUNCH_OPTIONS},
                              **{k: v for k, v in c.items() if k in LAUNCH_OPTIONS})
                for c in self.configs()]

    def choices(self) -> tuple[KernelChoice, ...]:
        """Every key this process launched so far, with its config and its origin."""
        with self._lock:
            return tuple(self._choices.values())

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        """Launch (or, with `warmup`, compile every config), choosing the config first."""
        clash = sorted(set(kwargs) & set(self.space.names))
        if clash:
            raise UsageError(f"{', '.join(clash)} are tuned by tuner.autotune; do not pass them "
                             f"to the launch of {self.__name__}")
        if warmup:
            return [self.fn.run(*args, grid=grid, warmup=True, **kwargs, **c) for c in self.configs()]
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        signature = signature_of(named, self.key)
        device = "cpu" if self._interpreted() else _device_of(named)
        with self._lock:
            choice = self._choices.get((signature, device))
            if choice is None and _untuned[0]:
                return self.fn.run(*args, grid=grid, warmup=False, **kwargs, **self.configs()[0])
            if choice is None:
                try:
                    choice = self._choose(signature, device, named, args, kwargs, grid)
                except Exception as exc:    # logged for `tuner search`, then raised as ever
                    error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
                    note_launch(self, device, signature, None, error)
                    raise
                self._choices[(signature, device)] = choice
        note_launch(self, device, signature, choice)
        self.best_config = choice.config_dict()
        return self.fn.run(*args, grid=grid, warmup=False, **kwargs, **self.best_config)

    def _choose(self, signature: KernelSignature, device: str, named: dict[str, Any],
                args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any) -> KernelChoice:
        """A stored config on a hit; otherwise a search's winner (stored when better)."""
        from tuner.platform import current_platform

        configs = self.configs()
        if self._source is None:
            self._source = source_hash(self.fn)
        key = kernel_key(self._source, space_hash(configs), signature)
        platform = current_platform(device)
        stored = self._db.find(key, platform.key)
        if stored is not None:
            reason = self.space.check(stored.config_dict())
            if reason is None:
                return KernelChoice(key, signature, stored.config, "database", True,
                                    stored.latency_ms, 0)
            warn_once(f"invalid:{key}", f"tuner.autotune: the config stored for {self.__name__} "
                                        f"({key}) does not fit its space ({reason}); searching again")

        def run_config(config: Config) -> None:
            self.fn.run(*args, grid=grid, warmup=False, **kwargs, **config)

        timer = self._timer or self._default_timer()
        search = search_configs(configs, lambda c: benchmark(run_config, c, timer=timer, named=named,
                                                             hooks=self._hooks),
                                max_trials=self._max_trials)
        best = search.best
        if best is None:
            run_config(configs[0])      # every config failed: let the first one raise its error
            raise TunerError(f"every config of {self.__name__} failed while tuning; the first: "
                             f"{search.trials[0].measurement.error}")
        self._hooks.zero(named)
        saved = self._db.save(self._record(key, signature, platform, best, search), platform)
        return KernelChoice(key, signature, best.config, "search", saved,
                            best.measurement.latency_ms, len(search.trials), search)

    def _record(self, key: str, signature: KernelSignature, platform: Platform, best: KernelTrial,
                search: KernelSearch) -> "KernelConfig":
        from tuner.storage import KernelConfig

        software = dict(platform.software)
        user, host = self._db.provenance()
        return KernelConfig(
            kernel_key=key, kernel_name=self.__name__[:255], platform_key=platform.key,
            key_args=signature.key_args, dtypes=",".join(signature.dtypes)[:1024],
            config=best.config, latency_ms=best.measurement.latency_ms,
            spread_ms=best.measurement.spread_ms or 0.0, configs_tried=len(search.trials),
            space_size=search.space_size, user=user[:255], host=host[:255],
            tuner_version=software.get("tuner", "")[:64], torch_version=software.get("torch", "")[:128],
            triton_version=software.get("triton", "")[:128])

    def _interpreted(self) -> bool:
        """Whether the kernel runs under Triton's interpreter (TRITON_INTERPRET=1 when defined)."""
        if self._interpreter is None:
            from triton.runtime.interpreter import InterpretedFunction

            fn, depth, found = self.fn, 0, False
            while fn is not None and depth < 8 and not found:
                found = isinstance(fn, InterpretedFunction)
                fn, depth = getattr(fn, "fn", None), depth + 1
            self._interpreter = found
        return self._interpreter

    def _default_timer(self) -> Timer:
        if not self._interpreted():
            return DoBenchTimer()
        warn_once("interpreter-timer", "tuner.autotune: under TRITON_INTERPRET=1 configs are timed "
                                       "by the wall clock of the interpreter, which ranks nothing real; "
                                       "pass timer= to choose by another measure")
        return WallClockTimer()


def _device_of(named: Mapping[str, Any]) -> str:
    """The device of the first tensor argument ("cpu" when there is none)."""
    for value in named.values():
        device = getattr(value, "device", None)
        if device is not None and hasattr(value, "dtype"):
            return str(device)
    return "cpu"
