"""What a compile call opts in to: stored configs that change numerics apply only where it does.

`torch.compile(model, backend="tuner", options={...})` and `tuner.compile(...)` carry two keys of
tuner's own, which `split_opt_ins` takes out before Inductor sees the options:

- `"precision"`: a `tuner.precision` mode other than fp32 (`tuner.compile(..., precision=...)`);
- `"unsafe": True`: rows whose search ran with `tuner search --unsafe` (`BestConfig.unsafe`: knobs
  that change numerics or make unchecked assumptions were in its space) (`tuner.compile(...,
  unsafe=True)`).

Without the opt-in such a row's graph gets Inductor's defaults and the backend says once per
process how to opt in (`tuner.lookup.backend_choice`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tuner.errors import UsageError
from tuner.precision import FP32, split_option

UNSAFE_OPTION = "unsafe"            # the torch.compile(options=...) key that opts in to --unsafe rows
UNSAFE_HINT = ("the stored config comes from a search run with --unsafe (its knobs may change numerics); "
               "opt in with options={'unsafe': True} or tuner.compile(model, unsafe=True)")


@dataclass(frozen=True)
class OptIn:
    """What a compile call opted in to: a `precision` other than fp32, and `unsafe` rows."""

    precision: str = FP32
    unsafe: bool = False


def split_opt_ins(options: Mapping[str, Any] | None) -> tuple[OptIn, dict[str, Any] | None]:
    """(what the call opted in to, the options without tuner's own keys) for `torch.compile(...,
    options={"precision": ..., "unsafe": True})`: Inductor never sees them. UsageError for an
    unknown precision or an `unsafe` that is not True or False."""
    precision, rest = split_option(options)
    if rest is None or UNSAFE_OPTION not in rest:
        return OptIn(precision), rest
    unsafe = rest.pop(UNSAFE_OPTION)
    if not isinstance(unsafe, bool):
        raise UsageError(f"options={{'unsafe': ...}} takes True or False, got {unsafe!r}")
    return OptIn(precision, unsafe), rest
