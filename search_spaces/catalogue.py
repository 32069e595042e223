"""The allow-list: every knob tuner may ever set, and the check applied to stored params.

The allow-list is the union of the CPU and CUDA tables (unsafe and training-only knobs
included, the special names `mode` and `freezing` among them) plus `precision` (`PRECISION`,
every mode of `tuner.precision`), which joins a space only through `load_space(precision=...)`. It is applied when lookup reads
a stored config, when an exchange file is imported, when a user space file is loaded,
and by `tuner.inductor.compiler.compile_config`. Nothing outside it reaches Inductor.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from tuner.errors import SpaceError
from tuner.precision import FP32, PRECISIONS
from tuner.search_spaces import cpu, cuda
from tuner.search_spaces.knobs import _MISSING, Knob, installed_default, same_value


def _union(tables: tuple[tuple[Knob, ...], ...]) -> dict[str, Knob]:
    merged: dict[str, Knob] = {}
    for table in tables:
        for knob in table:
            have = merged.get(knob.name)
            if have is None:
                merged[knob.name] = knob
                continue
            if have.kind != knob.kind:
                raise ValueError(f"knob {knob.name!r} has kinds {have.kind} and {knob.kind} in the tables")
            if knob.kind == "choice":
                extra = tuple(c for c in knob.choices if not any(same_value(c, h) for h in have.choices))
                merged[knob.name] = replace(have, choices=have.choices + extra)
            elif knob.kind in ("int", "float"):
                assert have.low is not None and have.high is not None
                assert knob.low is not None and knob.high is not None
                step = have.step if have.step == knob.step else None
                merged[knob.name] = replace(have, low=min(have.low, knob.low), high=max(have.high, knob.high),
                                            step=step)
    return merged


# The built-in tables by device type: what `load_space` starts from and a space file extends.
TABLES: dict[str, tuple[Knob, ...]] = {"cpu": cpu.KNOBS, "cuda": cuda.KNOBS}
# Opt-in (`tuner search --precision`), so in no table: a space without it keeps its hash.
PRECISION = Knob("precision", "choice", FP32, "precision", choices=tuple(PRECISIONS),
                 description="numeric precision of the compiled graph (tuner.precision); changes numerics")
ALLOWED: dict[str, Knob] = {**_union(tuple(TABLES.values())), PRECISION.name: PRECISION}


def known_knobs() -> tuple[str, ...]:
    """Names of every knob tuner may set, sorted."""
    return tuple(sorted(ALLOWED))


def allowed_knob(name: str) -> Knob:
    """The allow-list entry for `name`; SpaceError when tuner does not know the knob."""
    try:
        return ALLOWED[name]
    except KeyError:
        raise SpaceError(f"unknown knob {name!r}; tuner only sets the knobs listed by "
                         "tuner.search_spaces.known_knobs() (check the spelling, e.g. 'cpp.min_chunk_size')") from None


def param_problem(name: str, value: Any) -> str | None:
    """Why `name=value` is not allowed, or None. Never raises."""
    knob = ALLOWED.get(name)
    if knob is None:
        return f"unknown knob {name!r}"
    problem = knob.value_problem(value)
    if problem is None:
        return None
    if not knob.is_special and _is_installed_default(name, value):
        return None
    return f"{name}: {problem}"


def device_param_problem(name: str, value: Any, device: str) -> str | None:
    """Why `name=value` cannot apply on a `device` platform, or None. Stricter than `param_problem`:
    the knob and its value must be in that device's own table (`TABLES[device]`; `precision` where
    that mode runs on the device), not the union, so a CUDA-only knob or value is refused on a
    CPU platform. Never raises. (`tuner.storage.trust` applies it to every stored row.)"""
    table = {knob.name: knob for knob in TABLES.get(device, ())}
    if name == PRECISION.name:
        problem = PRECISION.value_problem(value)
        if problem is None and PRECISIONS[value].cuda_only and device != "cuda":
            problem = f"precision {value!r} does not run on {device}"
        return None if problem is None else f"{name}: {problem}"
    knob = table.get(name)
    if knob is None:
        return f"knob {name!r} is not one tuner sets on {device or 'this device'} platforms"
    problem = knob.value_problem(value)
    if problem is None or (not knob.is_special and _is_installed_default(name, value)):
        return None
    return f"{name}: {problem} (on {device})"


def _is_installed_default(name: str, value: Any) -> bool:
    have = installed_default(name)
    return have is not _MISSING and same_value(have, value)


def validate_params(params: Mapping[str, Any]) -> None:
    """Check stored or imported knob values against the allow-list.

    Raises SpaceError (one line, first problem found) for a knob name tuner does not
    know, a value of the wrong type, or a value outside the knob's range or choices.
    Returns None when every entry is allowed. Does not check the installed torch:
    `tuner.inductor.compiler.compile_config` does that.
    """
    if not isinstance(params, Mapping):
        raise SpaceError(f"knob params must be a mapping of name to value, got {type(params).__name__}")
    for name in sorted(params):
        if not isinstance(name, str):
            raise SpaceError(f"knob names must be strings, got {name!r}")
        problem = param_problem(name, params[name])
        if problem is not None:
            raise SpaceError(f"invalid knob params: {problem}; "
                             "see tuner.search_spaces.known_knobs() and each knob's range")
