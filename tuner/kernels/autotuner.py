"""`tuner.autotune`: a drop-in replacement for `triton.autotune` that keeps kernel tile
configs in tuner's database.

    @tuner.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4),
                             triton.Config({"BLOCK": 128}, num_warps=8)], key=["n"])
    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr): ...

takes `triton.autotune`'s arguments as they are, positionally or by keyword, and gives
Triton's object (`tuner.kernels.tuned.AutotunedKernel`, a `triton.runtime.autotuner.Autotuner`).
The compact form, `space={"BLOCK": [64, 128], "num_warps": [4, 8]}` with an optional
`constraint`, is a second way in. See `AutotunedKernel` for what a launch does.

Inside `untuned_launches()` (the gate's float64 reference run), a key not chosen yet launches
its first config instead: nothing is read, timed, stored or remembered.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tuner.errors import UsageError
from tuner.kernels.bench import Timer
from tuner.kernels.declare import check_callables, check_names, declare_configs
from tuner.kernels.key import python_function
from tuner.kernels.options import TunerOptions
from tuner.kernels.space import Constraint

if TYPE_CHECKING:
    from tuner.kernels.tuned import AutotunedKernel

__all__ = ["autotune"]

def autotune(configs: Sequence[Any] | None = None, key: Sequence[str] | None = None,
             prune_configs_by: Mapping[str, Any] | None = None, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, pre_hook: Callable[..., Any] | None = None,
             post_hook: Callable[..., Any] | None = None, warmup: int | None = None, rep: int | None = None,
             use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None,
             cache_results: bool = False, *, space: Mapping[str, Sequence[Any]] | None = None,
             constraint: Constraint | None = None, max_trials: int | None = None,
             timer: Timer | None = None, db: str | None = None) -> Callable[[Any], "AutotunedKernel"]:
    """Decorate a `@triton.jit` kernel (or a stack over one, `triton.heuristics` included) so
    it launches with the best of its configs for each key, kept in tuner's database.

    Triton's arguments, in Triton's order and with Triton's meaning: `configs` (a list of
    `triton.Config`), `key` (parameter names whose values, with every tensor parameter's
    dtype, select a config), `prune_configs_by` (`perf_model`, `top_k`, `early_config_prune`),
    `reset_to_zero`, `restore_value`, `pre_hook`/`post_hook` (called as Triton calls them),
    `warmup`/`rep`/`use_cuda_graph`/`do_bench` (the timer). `cache_results` is accepted: the
    database is the cache, across processes and machines of one platform.

    Keyword-only, tuner's own: `space` (value lists per constexpr parameter or launch option;
    instead of `configs`) with `constraint(config_dict) -> bool` run before any launch,
    `max_trials` (the configs measured per key; default every config of a list, 64 of a
    space), `timer(launch, config)` (a tuner timer, before do_bench), `db` (a database URL;
    default TUNER_DB or the per-user file). Raises UsageError, naming the fix, for arguments
    that do not fit the kernel.
    """
    if key is None:
        raise UsageError("tuner.autotune needs key=[parameter names], e.g. key=['n'] (key=[] tunes once)")
    if max_trials is not None and max_trials < 1:
        raise UsageError(f"max_trials must be at least 1, got {max_trials}")
    check_callables(prune_configs_by, {"pre_hook": pre_hook, "post_hook": post_hook, "do_bench": do_bench,
                                       "timer": timer})
    options = TunerOptions(max_trials=max_trials, timer=timer, db=db, cache_results=bool(cache_results))

    def decorator(fn: Any) -> AutotunedKernel:
        arg_names = getattr(fn, "arg_names", None)
        if arg_names is None or not hasattr(fn, "run") or python_function(fn) is None:
            raise UsageError(f"tuner.autotune decorates Triton kernels; put it above @triton.jit "
                             f"(got {fn!r})")
        check_names(key, reset_to_zero, restore_value, arg_names)
        declared = declare_configs(configs, space, constraint, arg_names)
        from tuner.kernels.tuned import AutotunedKernel

        return AutotunedKernel(fn, declared, key=list(key), prune_configs_by=prune_configs_by,
                               reset_to_zero=reset_to_zero, restore_value=restore_value,
                               hooks=(pre_hook, post_hook), bench=(warmup, rep, use_cuda_graph, do_bench),
                               options=options)

    return decorator
