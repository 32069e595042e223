"""The object `tuner.autotune` returns: Triton's `Autotuner`, choosing configs DB-first.

A subclass of `triton.runtime.autotuner.Autotuner`, so code written against Triton's object
reads what it expects (`configs`, `cache`, `best_config`, `fn`, `arg_names`, `keys`,
`prune_configs`), stacks under and over `triton.heuristics` as Triton's does, and Dynamo
recognises it where its Triton support is on (a GPU). Where it is off, a launch inside
`torch.compile` becomes one `tuner::launch_kernel` op in the graph (`tuner.kernels.graph_op`).

At the first launch per (key values, tensor dtypes by parameter, device) in a process:
the configs are pruned as Triton prunes them (`early_config_prune` on the launch's named
arguments, then `perf_model`'s `top_k`). One config left launches at once, nothing
benchmarked or stored, as in Triton. Otherwise the database is read: a hit among the pruned
configs launches at once, benchmarking nothing; a miss times each pruned config (Triton's
hooks around every launch, `restore_value` and `reset_to_zero` included), stores the
winner with its timings, and launches it. Later launches of the key reuse the choice.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from triton.runtime.autotuner import Autotuner

from tuner.errors import TunerError, UsageError
from tuner.kernels import graph_op
from tuner.kernels.options import TunerOptions, untuned_depth
from tuner.kernels.bench import DoBenchTimer, Timer, WallClockTimer, benchmark
from tuner.kernels.guarded_db import KernelDatabase, warn_once
from tuner.kernels.declare import Declared, ident, stored_form
from tuner.kernels.discovery import note_launch
from tuner.kernels.dynamo_prune import db_first_prune
from tuner.kernels.key import KernelSignature, is_tensor, kernel_key, python_function, signature_of, source_hash
from tuner.kernels.search import DEFAULT_MAX_TRIALS, KernelChoice, KernelSearch, search_configs
from tuner.kernels.space import Config, space_hash

if TYPE_CHECKING:
    from tuner.keys import Platform
    from tuner.storage import KernelConfig

_LAUNCH = ("grid", "warmup")      # what Triton's launcher adds to a kernel's own kwargs


class AutotunedKernel(Autotuner):
    """A Triton kernel whose config comes from tuner's database, or from a search.

    Launch it like any Triton kernel: `kernel[grid](*args, **kwargs)`. Thread-safe: a
    second thread launching a key under search waits for that search.
    """

    def __init__(self, fn: Any, declared: Declared, *, key: list[str], prune_configs_by: Any,
                 reset_to_zero: Any, restore_value: Any, hooks: tuple[Any, Any], bench: tuple[Any, ...],
                 options: TunerOptions) -> None:
        warmup, rep, use_cuda_graph, do_bench = bench
        super().__init__(fn, list(fn.arg_names), list(declared.configs), key, reset_to_zero, restore_value,
                         pre_hook=hooks[0], post_hook=hooks[1], prune_configs_by=prune_configs_by,
                         warmup=warmup, rep=rep, use_cuda_graph=use_cuda_graph, do_bench=do_bench)
        self.cache_results = options.cache_results      # the database is the cache
        self.declared, self.options = declared, options
        self._stored_of = {id(c): s for c, s in zip(declared.configs, declared.stored)}
        self._tuned_names = sorted({n for c in declared.configs for n in c.kwargs})
        self._triton_timer = do_bench is not None or warmup is not None or rep is not None or use_cuda_graph
        self._db = KernelDatabase(options.db)
        self._lock = threading.RLock()
        self._source: str | None = None
        self._choices: dict[tuple[KernelSignature, str], tuple[KernelChoice, Any]] = {}
        self._interpreter: bool | None = None
        self.best_config: Any = None      # the triton.Config of the latest launch
        self.__name__ = python_function(fn).__name__
        self.graph_index = graph_op.register(self)
        # DB-first under Dynamo's Triton support (a GPU): see tuner.kernels.dynamo_prune.
        self.user_early_config_prune = self.early_config_prune
        self.early_config_prune = db_first_prune(self.graph_index, key, self.arg_names, self.early_config_prune,
                                                 restores=bool(self.restore_value or self.reset_to_zero))

    def __repr__(self) -> str:
        return f"<tuner.autotune kernel {self.__name__}: {len(self.configs)} configs>"

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            import torch

            if torch.compiler.is_compiling():     # reached only where Dynamo's Triton support is off
                return graph_op.launch_in_graph(self, grid, args, kwargs)
            return self.run(*args, grid=grid, warmup=False, **kwargs)
        return launch

    def grid_metas(self) -> list[dict[str, Any]]:
        """Each config's launch values, in `configs` order: what a grid function sees of it."""
        return [dict(c.all_kwargs()) for c in self.configs]

    def stored_form(self, config: Any) -> Config:
        """The dict a config is stored as (the declared combination, for a space)."""
        return dict(self._stored_of.get(id(config)) or stored_form(config))

    def choices(self) -> tuple[KernelChoice, ...]:
        """Every key this process launched so far, with its config and its origin."""
        with self._lock:
            return tuple(choice for choice, _ in self._choices.values())

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch (Triton's `run`: `grid` and `warmup` among the kwargs), choosing the config first."""
        clash = sorted(set(kwargs) & set(self._tuned_names))
        if clash:
            raise UsageError(f"{', '.join(clash)} are tuned by tuner.autotune; do not pass them "
                             f"to the launch of {self.__name__}")
        nargs = dict(zip(self.arg_names, args))
        if kwargs.get("warmup"):
            with self._lock:
                self.nargs = nargs
                return [self.fn.run(*args, **kwargs, **c.all_kwargs()) for c in self.prune_configs(kwargs)]
        named = {**nargs, **{k: v for k, v in kwargs.items() if k in self.arg_names}}
        signature = signature_of(named, self.keys, self.arg_names)
        device = "cpu" if self._interpreted() else _device_of(named)
        with self._lock:
            chosen = self._choices.get((signature, device))
            if chosen is None and untuned_depth():
                return self.fn.run(*args, **kwargs, **self.configs[0].all_kwargs())
            if chosen is None:
                try:
                    chosen = self._choose(signature, device, nargs, args, kwargs)
                except Exception as exc:    # logged for `tuner search`, then raised as ever
                    note_launch(self, device, signature, None, f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
                    raise
                self._choices[(signature, device)] = chosen
                self.cache[signature.triton_key()] = chosen[1]
        choice, config = chosen
        note_launch(self, device, signature, choice)
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**nargs, **kwargs, **config.all_kwargs()})
        return self.fn.run(*args, **kwargs, **config.all_kwargs())

    def _choose(self, signature: KernelSignature, device: str, nargs: dict[str, Any],
                args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[KernelChoice, Any]:
        """The only config left by pruning; a stored config on a hit; otherwise a search's winner."""
        from tuner.platform import current_platform

        key = self._kernel_key(signature)
        self.nargs = nargs
        try:
            pruned = list(self.prune_configs(kwargs))
        finally:
            self.nargs = None
        by_ident: dict[str, Any] = {}   # each config once (Triton would time a repeat twice)
        for config in pruned:
            by_ident.setdefault(ident(self.stored_form(config)), config)
        pruned = list(by_ident.values())
        if len(pruned) == 1:
            only = pruned[0]
            return KernelChoice(key, signature, tuple(self.stored_form(only).items()), "only", False, None, 0), only
        platform = current_platform(device)
        stored = self._db.find(key, platform.key)
        if stored is not None:
            hit = next((c for c in pruned if ident(self.stored_form(c)) == ident(stored.config_dict())), None)
            if hit is not None:
                return KernelChoice(key, signature, stored.config, "database", True, stored.latency_ms, 0), hit
            warn_once(f"invalid:{key}", f"tuner.autotune: the config stored for {self.__name__} ({key}) "
                                        f"is not among its configs for this launch; searching again")
        timer = self._timer()
        search = search_configs([self.stored_form(c) for c in pruned],
                                lambda d: benchmark(self._kernel_call(by_ident[ident(d)], nargs, args, kwargs), d,
                                                    timer=timer),
                                max_trials=self.options.max_trials or
                                (DEFAULT_MAX_TRIALS if self.declared.from_space else len(pruned)))
        best = search.best
        if best is None:
            self._kernel_call(pruned[0], nargs, args, kwargs)()   # every config failed: let the first raise
            raise TunerError(f"every config of {self.__name__} failed while tuning; the first: "
                             f"{search.trials[0].measurement.error}")
        winner = by_ident[ident(dict(best.config))]
        self.pre_hook({**nargs, **kwargs, **winner.all_kwargs()}, reset_only=True)
        saved = self._db.save(self._record(key, signature, platform, search), platform)
        choice = KernelChoice(key, signature, best.config, "search", saved, best.measurement.latency_ms,
                              len(search.trials), search)
        return choice, winner

    def stored_launches(self, device: str, dtypes: tuple[tuple[str, Any], ...],
                        statics: tuple[tuple[int, Any], ...]) -> tuple[tuple[tuple[Any, ...], Any], ...]:
        """For `dynamo_prune`, at trace time: the configs stored for this kernel on `device`'s
        platform under these tensor dtypes and these non-numeric key values (by position), as
        (the key values, each number as stored and each tensor key as its shape; the launch
        values of the config). Rows of other kernels, sources or configs are left out."""
        from tuner.platform import current_platform

        wanted_dtypes = tuple((name, str(dtype)) for name, dtype in dtypes)
        statics_as_key = {i: signature_of({"v": v}, ["v"], []).key_args[0][1] for i, v in statics}
        found = []
        for row in self._db.find_all(current_platform(device).key, self.__name__[:255]):
            stored_args = dict(row.key_args)
            if any(k not in stored_args for k in self.keys):
                continue
            signature = KernelSignature(tuple((k, stored_args[k]) for k in self.keys), wanted_dtypes)
            if self._kernel_key(signature) != row.kernel_key:
                continue            # another source, config list, or dtypes
            values = [v for _, v in signature.key_args]
            if any(values[i] != v for i, v in statics_as_key.items()):
                continue
            launch = next((tuple(c.all_kwargs().items()) for c in self.configs
                           if ident(self.stored_form(c)) == ident(row.config_dict())), None)
            if launch is not None:
                found.append((tuple(_shape_of(v) for v in values), launch))
        return tuple(found)

    def _kernel_key(self, signature: KernelSignature) -> str:
        if self._source is None:
            self._source = source_hash(self.fn)
        return kernel_key(self._source, space_hash(self.declared.stored), signature)

    def _kernel_call(self, config: Any, nargs: dict[str, Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        """One benchmark launch of `config`, with Triton's hooks around it (`Autotuner._bench`)."""
        current = {**kwargs, **config.all_kwargs()}
        full_nargs = {**nargs, **current}

        def kernel_call() -> None:
            if config.pre_hook:
                config.pre_hook(full_nargs)
            self.pre_hook(full_nargs)
            try:
                self.fn.run(*args, **current)
            except Exception as exc:
                self.post_hook(full_nargs, exception=exc)
                raise
            self.post_hook(full_nargs, exception=None)
        return kernel_call

    def _record(self, key: str, signature: KernelSignature, platform: "Platform",
                search: KernelSearch) -> "KernelConfig":
        from tuner.storage import KernelConfig

        best = search.best
        software = dict(platform.software)
        user, host = self._db.provenance()
        return KernelConfig(
            kernel_key=key, kernel_name=self.__name__[:255], platform_key=platform.key,
            key_args=signature.key_args, dtypes=signature.dtype_text()[:1024],
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

    def _timer(self) -> Timer:
        """tuner's timer=, else Triton's do_bench (given, or warmup/rep), else the default:
        the driver's benchmarker on a device, the interpreter's wall clock (warned) under it."""
        if self.options.timer is not None:
            return self.options.timer
        if self._triton_timer or not self._interpreted():
            return DoBenchTimer(self.do_bench)
        warn_once("interpreter-timer", "tuner.autotune: under TRITON_INTERPRET=1 configs are timed "
                                       "by the wall clock of the interpreter, which ranks nothing real; "
                                       "pass do_bench= or timer= to choose by another measure")
        return WallClockTimer()


def _shape_of(value: Any) -> Any:
    """A stored key value as traced code compares it: a tensor key ("shape(4, 8)") as a tuple."""
    if isinstance(value, str) and value.startswith("shape("):
        inner = value[len("shape("):-1].strip().rstrip(",")
        return tuple(int(p) for p in inner.split(",")) if inner else ()
    return value


def _device_of(named: dict[str, Any]) -> str:
    """The device of the first tensor argument ("cpu" when there is none)."""
    for value in named.values():
        if is_tensor(value) and getattr(value, "device", None) is not None:
            return str(value.device)
    return "cpu"
