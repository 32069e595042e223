"""The key of a `tuner.autotune` kernel launch: what must match for a stored config to apply.

kernel key = hash of (the kernel's source hash, its space hash, the key arguments' values,
each tensor parameter's dtype named by its parameter). Both halves are by parameter, as
Triton's autotuner keys them: keyword order never changes a key, and an fp32-dst/fp16-src
launch never shares one with fp16-dst/fp32-src. The platform is the other half of the database's
unique key, so the same kernel on another GPU, or under other torch/triton versions, is
tuned again. The source hash covers the kernel's own source (decorators excluded, so the
same kernel hashes alike compiled or under `TRITON_INTERPRET=1`) and the sources of the
`@triton.jit` helpers it calls by global name, transitively.

Changing any formula here changes stored keys: old rows stop matching. Bump
`KERNEL_KEY_FORMAT` whenever it changes.
"""
from __future__ import annotations

import hashlib
import inspect
import numbers
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from tuner.errors import UsageError
from tuner.kernels.space import Scalar
from tuner.keys import canonical_json

KERNEL_KEY_FORMAT = 2       # 2: dtypes named by parameter, dtype-valued key arguments
KERNEL_KEY_LEN = 32


@dataclass(frozen=True)
class KernelSignature:
    """What a launch contributes to the key: the key arguments, and (parameter, dtype) for
    each tensor parameter, in parameter order."""

    key_args: tuple[tuple[str, Scalar], ...]
    dtypes: tuple[tuple[str, str], ...]

    def dtype_text(self) -> str:
        """The dtypes as stored (`kernel_configs.dtypes`): `x_ptr=float32,out_ptr=float16`."""
        return ",".join(f"{name}={dtype.removeprefix('torch.')}" for name, dtype in self.dtypes)

    def triton_key(self) -> tuple[Any, ...]:
        """The key as Triton's `Autotuner.cache` holds it: the key values, then the dtypes."""
        return tuple(value for _, value in self.key_args) + tuple(d for _, d in self.dtypes)


def python_function(kernel: Any) -> Callable[..., Any] | None:
    """The plain Python function under a Triton kernel object (JITFunction, the
    interpreter's InterpretedFunction, heuristics, ...); None for anything else."""
    seen = 0
    while not inspect.isfunction(kernel) and seen < 8:
        kernel, seen = getattr(kernel, "fn", None), seen + 1
        if kernel is None:
            return None
    return kernel if inspect.isfunction(kernel) else None


def _is_triton_kernel(value: Any) -> bool:
    return type(value).__module__.startswith("triton.") and python_function(value) is not None


def _source(fn: Callable[..., Any]) -> str:
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise UsageError(f"cannot read the source of kernel {fn.__name__} ({exc}); "
                         f"define @tuner.autotune kernels in a Python file") from exc
    found = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
    return text[found.start():] if found else text


def source_hash(kernel: Any) -> str:
    """The hex sha256 of the kernel's source and its jit helpers' sources, in call order."""
    root = python_function(kernel)
    if root is None:
        raise UsageError(f"{kernel!r} is not a Triton kernel; put @tuner.autotune above @triton.jit")
    parts: list[str] = []
    seen: set[int] = set()
    pending = [root]
    while pending:
        fn = pending.pop(0)
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        parts.append(_source(fn))
        for name in fn.__code__.co_names:
            value = fn.__globals__.get(name)
            if value is not None and _is_triton_kernel(value):
                pending.append(python_function(value))
    return hashlib.sha256("\n\0\n".join(parts).encode()).hexdigest()


def _key_value(name: str, value: Any) -> Scalar:
    """A key argument as a JSON scalar: numbers and strings as they are, a tensor by its shape,
    a dtype (`tl.float32`, `torch.float16`) by its name."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if value is None:
        return "None"
    if is_tensor(value):
        return f"shape{tuple(int(s) for s in value.shape)}"
    if _is_dtype(value):
        return f"dtype:{str(value).removeprefix('torch.')}"
    raise UsageError(f"key argument {name!r} is a {type(value).__name__}; key on ints, floats, "
                     f"strings, dtypes or tensors (by shape)")


def is_tensor(value: Any) -> bool:
    """A tensor argument (anything with a dtype and a data pointer, as Triton takes them)."""
    return hasattr(value, "dtype") and hasattr(value, "data_ptr")


def _is_dtype(value: Any) -> bool:
    """torch.float16, tl.float32 and their kin: dtypes passed as arguments (`DTYPE: tl.constexpr`)."""
    kind = type(value)
    return kind.__name__ == "dtype" and kind.__module__.split(".")[0] in ("torch", "triton")


def signature_of(named: Mapping[str, Any], key: Sequence[str], params: Sequence[str]) -> KernelSignature:
    """The signature of one launch: `named` holds the launch's arguments by parameter name
    (in any order), `params` the kernel's parameters in order. Raises UsageError for a key
    argument the launch does not pass."""
    missing = [name for name in key if name not in named]
    if missing:
        raise UsageError(f"key argument(s) {', '.join(missing)} not passed to the kernel launch")
    return KernelSignature(
        key_args=tuple((name, _key_value(name, named[name])) for name in key),
        dtypes=tuple((name, str(named[name].dtype)) for name in params
                     if name in named and is_tensor(named[name])))


def kernel_key(source: str, space: str, signature: KernelSignature) -> str:
    """The key a kernel's config is stored under (per platform)."""
    data = {"format": KERNEL_KEY_FORMAT, "source": source, "space": space,
            "key_args": [list(item) for item in signature.key_args],
            "dtypes": [list(item) for item in signature.dtypes]}
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:KERNEL_KEY_LEN]
