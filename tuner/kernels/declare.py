"""What a `tuner.autotune` decorator declares, checked once at decoration: the configs (a list
of `triton.Config`, or a compact space of value lists) and the names it refers to.

Each config has a stored form, a dict of JSON scalars: for a `triton.Config`, its `kwargs`
plus `num_warps`, `num_stages`, `num_ctas` (and `maxnreg` when set), which is what it
launches with; for a space, the combination as declared. The space hash covers the stored
forms, so a change to the configs or to the constraint gives the kernel new keys.

Every mistake is one `UsageError` naming the fix: a config list given as a space and the
reverse, a name that is not a parameter of the kernel, a value that cannot be stored.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.errors import UsageError
from tuner.kernels.space import LAUNCH_OPTIONS, Config, Constraint, KernelSpace, is_scalar
from tuner.keys import canonical_json

PRUNE_FIELDS = ("perf_model", "top_k", "early_config_prune")


@dataclass(frozen=True)
class Declared:
    """The configs of one decorator: `triton.Config` objects and their stored forms, in order."""

    configs: tuple[Any, ...]
    stored: tuple[Config, ...]
    from_space: bool


def ident(config: Mapping[str, Any]) -> str:
    """A stored config's identity (names in any order)."""
    return canonical_json(sorted(config.items()))


def stored_form(config: Any) -> Config:
    """The stored form of a `triton.Config` (see the module docstring)."""
    return {k: v for k, v in config.all_kwargs().items() if k != "ir_override"}


def declare_configs(configs: Any, space: Any, constraint: Constraint | None,
                    arg_names: Sequence[str]) -> Declared:
    """Check `configs` (a list of triton.Config) or `space` (a dict of value lists): exactly
    one of them, of the right kind. An empty config list is Triton's one default config."""
    import triton

    if configs is not None and space is not None:
        raise UsageError("tuner.autotune takes configs=[triton.Config(...), ...] or space={name: [values]}, not both")
    if space is not None:
        if not isinstance(space, Mapping):
            raise UsageError(f"space= takes a dict of value lists, e.g. space={{'BLOCK': [64, 128]}}; "
                             f"for a list of triton.Config write configs=[...] (got {type(space).__name__})")
        declared = KernelSpace.declare(space, arg_names, constraint).configs()
        made = tuple(triton.Config({k: v for k, v in c.items() if k not in LAUNCH_OPTIONS},
                                   **{k: v for k, v in c.items() if k in LAUNCH_OPTIONS}) for c in declared)
        return Declared(made, declared, from_space=True)
    if configs is None:
        raise UsageError("tuner.autotune needs configs=[triton.Config({...}, num_warps=...), ...] "
                         "or space={name: [values]}")
    if isinstance(configs, Mapping):
        raise UsageError("configs= takes a list of triton.Config; for a dict of value lists write "
                         "space={...} (tuner.autotune(space={'BLOCK': [64, 128]}, key=[...]))")
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Sequence):
        raise UsageError(f"configs= takes a list of triton.Config, got {type(configs).__name__}")
    made = tuple(configs) or (triton.Config({}, num_warps=4, num_stages=3, num_ctas=1),)
    stored = tuple(_check_config(i, c, arg_names) for i, c in enumerate(made))
    if constraint is not None:
        if not callable(constraint):
            raise UsageError(f"constraint must be a function of one config dict, got {constraint!r}")
        kept = [(c, s) for c, s in zip(made, stored) if constraint(dict(s))]
        if not kept:
            raise UsageError(f"the constraint rejects all {len(made)} configs; loosen it")
        made, stored = tuple(c for c, _ in kept), tuple(s for _, s in kept)
    return Declared(made, stored, from_space=False)


def _check_config(index: int, config: Any, arg_names: Sequence[str]) -> Config:
    if isinstance(config, Mapping):
        raise UsageError(f"configs[{index}] is a dict; write triton.Config({dict(config)!r}) or, "
                         f"for value lists, space={{...}}")
    if not (hasattr(config, "kwargs") and hasattr(config, "all_kwargs")):
        raise UsageError(f"configs[{index}] is a {type(config).__name__}, not a triton.Config; "
                         f"write triton.Config({{'BLOCK': 64}}, num_warps=4)")
    if getattr(config, "ir_override", None) is not None:
        raise UsageError(f"configs[{index}] sets ir_override, which tuner.autotune cannot store; drop it")
    unknown = [name for name in config.kwargs if name not in arg_names]
    if unknown:
        raise UsageError(f"configs[{index}] sets {', '.join(map(repr, unknown))}, not a parameter of the "
                         f"kernel ({', '.join(arg_names)}); fix the config")
    stored = stored_form(config)
    bad = [(k, v) for k, v in stored.items() if not is_scalar(v)]
    if bad:
        raise UsageError(f"configs[{index}] sets {bad[0][0]}={bad[0][1]!r}, not a JSON scalar; "
                         f"tuned values must be bools, ints, finite floats or strings")
    return stored


def check_names(key: Any, reset_to_zero: Any, restore_value: Any, arg_names: Sequence[str]) -> None:
    """`key`, `reset_to_zero` and `restore_value` are lists of the kernel's parameter names."""
    for what, names in (("key", key), ("reset_to_zero", reset_to_zero or ()),
                        ("restore_value", restore_value or ())):
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise UsageError(f"{what} must be a list of parameter names, e.g. {what}=['n']; got {names!r}")
        unknown = [n for n in names if n not in arg_names]
        if unknown:
            raise UsageError(f"{what} must list parameters of the kernel ({', '.join(arg_names)}); "
                             f"got {list(names)!r}")


def check_callables(prune_configs_by: Any, hooks: Mapping[str, Any]) -> None:
    """`prune_configs_by` is a dict of Triton's three fields; hooks and do_bench are functions."""
    if prune_configs_by is not None:
        if not isinstance(prune_configs_by, Mapping):
            raise UsageError(f"prune_configs_by takes a dict with {', '.join(PRUNE_FIELDS)}; "
                             f"got {type(prune_configs_by).__name__}")
        unknown = sorted(set(prune_configs_by) - set(PRUNE_FIELDS))
        if unknown:
            raise UsageError(f"prune_configs_by has {', '.join(unknown)}; its fields are {', '.join(PRUNE_FIELDS)}")
        hooks = {**hooks, **{f"prune_configs_by[{k!r}]": prune_configs_by.get(k)
                             for k in ("perf_model", "early_config_prune")}}
    for name, value in hooks.items():
        if value is not None and not callable(value):
            raise UsageError(f"{name} must be a function, got {value!r}")

