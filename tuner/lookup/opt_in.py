"""What a compile call opts in to: stored configs that change numerics apply only where it does.

`torch.compile(model, backend="tuner", options={...})` and `tuner.compile(...)` carry two keys of
tuner's own, which `split_opt_ins` takes out before Inductor sees the options:

- `"precision"`: a `tuner.precision` mode other than fp32 (`tuner.compile(..., precision=...)`);
- `"unsafe": True`: rows whose search ran with `tuner search --unsafe` (`BestConfig.unsafe`: knobs
  that change numerics or make unchecked assumptions were in its space) (`tuner.compile(...,
  unsafe=True)`).

Without the opt-in such a row's graph gets Inductor's defaults and the backend says once per
process how to opt in (`tuner.lookup.choice.backend_choice`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tuner.errors import UsageError
from tuner.precision import FP32, get_precision

PRECISION_OPTION = "precision"      # the torch.compile(options=...) key that opts in to a precision
UNSAFE_OPTION = "unsafe"            # the torch.compile(options=...) key that opts in to --unsafe rows
UNSAFE_HINT = ("the stored config comes from a search run with --unsafe (its knobs may change numerics); "
               "opt in with options={'unsafe': True} or tuner.compile(model, unsafe=True)")


@dataclass(frozen=True)
class OptIn:
    """What a compile call opted in to: a `precision` other than fp32, and `unsafe` rows."""

    precision: str = FP32
    unsafe: bool = False


def opt_in_hint(name: str) -> str:
    """The one line that tells a user how to opt in to a stored precision."""
    return (f"the stored config uses precision {name}; opt in with options={{'precision': '{name}'}} "
            f"or tuner.compile(model, precision='{name}')")


def split_opt_ins(options: Mapping[str, Any] | None) -> tuple[OptIn, dict[str, Any] | None]:
    """(what the call opted in to, the options without tuner's own keys) for `torch.compile(...,
    options={"precision": ..., "unsafe": True})`: Inductor never sees them. UsageError for an
    unknown precision or an `unsafe` that is not True or False."""
    precision, rest = _split_precision(options)
    if rest is None or UNSAFE_OPTION not in rest:
        return OptIn(precision), rest
    unsafe = rest.pop(UNSAFE_OPTION)
    if not isinstance(unsafe, bool):
        raise UsageError(f"options={{'unsafe': ...}} takes True or False, got {unsafe!r}")
    return OptIn(precision, unsafe), rest


def _split_precision(options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """(the precision the call opted in to, the options without its key); fp32 when absent."""
    if not options or PRECISION_OPTION not in options:
        return FP32, None if options is None else dict(options)
    rest = {k: v for k, v in options.items() if k != PRECISION_OPTION}
    return get_precision(options[PRECISION_OPTION]).name, rest
