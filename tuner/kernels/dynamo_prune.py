"""DB-first pruning for Dynamo's Triton support: a stored config reaches Inductor alone.

Where Dynamo's Triton support is on (a GPU), Dynamo recognises a `tuner.autotune` kernel as
Triton's `Autotuner` (`torch/_dynamo/variables/builder.py`) and, because its
`early_config_prune` is set, traces that function at compile time with the launch's named
arguments (`TritonHOPifier.do_prune_configs` in `torch/_higher_order_ops/triton_kernel_wrap.py`),
then hands Inductor a plain `triton.autotune(configs=<pruned>, key=[])` of the kernel. So the
kernel's `early_config_prune` is this module's function, run in three steps:

1. the user's own `early_config_prune`, if any (eager launches get only this step);
2. under compile, a lookup run at trace time (`stored_launches`, marked
   `torch._dynamo.assume_constant_result`, so Dynamo calls it with constants only and never
   traces the database): given the device, the tensor parameters' dtypes and the key values
   that are not numbers, it returns this kernel's stored configs on this platform with their
   numeric key values (a tensor key as its shape). The traced code compares the launch's key
   values with those: a symbolic value (dynamic shapes) compares too, and Dynamo guards the
   graph on the outcome, so one graph serves one stored key and another value recompiles;
3. a hit among the configs returns that one config: Inductor launches it without
   benchmarking. A miss or an unusable database returns the configs as they are, and
   Inductor autotunes them at run time as it does for `@triton.autotune` (not stored: the
   eager launches, `tuner search` among them, store winners). A kernel with `restore_value`
   or `reset_to_zero` gets its first config instead on a miss: the kernel Dynamo rebuilds
   from the pruned configs has neither, so Inductor's benchmarks would corrupt its outputs.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["db_first_prune", "stored_launches"]


def db_first_prune(index: int, keys: Sequence[str], params: Sequence[str],
                   user_prune: Callable[..., Any] | None, *, restores: bool) -> Callable[..., Any]:
    """The `early_config_prune` of kernel `index` (closing over constants only: Dynamo traces it).
    `restores`: the kernel has `restore_value` or `reset_to_zero` arguments."""
    import torch
    from torch._dynamo import assume_constant_result

    keys, params = tuple(keys), tuple(params)

    def lookup(device: Any, dtypes: tuple[Any, ...], statics: tuple[Any, ...]) -> tuple[Any, ...]:
        return stored_launches(index, device, dtypes, statics)   # called for real: `index` is no argument
    lookup = assume_constant_result(lookup)

    def early_config_prune(configs: Any, named_args: dict[str, Any], **kwargs: Any) -> Any:
        if user_prune is not None:
            configs = user_prune(configs, named_args, **kwargs)
        if not torch.compiler.is_compiling():
            return configs
        named = {**named_args, **kwargs}
        values = []             # numbers and tensor shapes: maybe symbolic, compared below
        statics = []            # the other key values (strings, dtypes): constants
        for position, name in enumerate(keys):
            value = named[name]
            if isinstance(value, torch.Tensor):
                values.append(tuple(value.shape))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                values.append(value)
            else:
                values.append(None)
                statics.append((position, value))
        dtypes = []
        device = None
        for name in params:
            value = named.get(name)
            if isinstance(value, torch.Tensor):
                dtypes.append((name, value.dtype))
                device = value.device if device is None else device
        for stored, launch in lookup(device, tuple(dtypes), tuple(statics)):
            # Comparing a symbolic key value guards the graph on it (one stored config per key).
            if all(v is None or v == s for v, s in zip(values, stored)):
                for config in configs:
                    kw = config.all_kwargs()
                    if len(kw) == len(launch) and all(kw.get(k) == v for k, v in launch):
                        return [config]
        # Dynamo rebuilds the pruned kernel as triton.autotune(configs, key=[]), without
        # restore_value or reset_to_zero: Inductor would benchmark an in-place kernel unguarded.
        return configs[:1] if restores else configs

    return early_config_prune


def stored_launches(index: int, device: Any, dtypes: tuple[Any, ...],
                    statics: tuple[Any, ...]) -> tuple[Any, ...]:
    """Called with constants at trace time: `AutotunedKernel.stored_launches` of kernel
    `index` (empty on a miss, or on a database that cannot be used, warned about once)."""
    from tuner.kernels import graph_op

    return graph_op.kernel_at(index).stored_launches("cpu" if device is None else str(device), dtypes, statics)
