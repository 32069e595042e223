"""The `Knob` value: one tunable setting, and its check against the installed torch.

A knob is named by its Inductor config path (`max_fusion_size`, `cpp.simdlen`),
by `functorch.<name>` for `torch._functorch.config`, or by one of three special names:
`mode` (a torch.compile mode preset, expanded by `torch._inductor.list_mode_options`),
`freezing` (decided when Dynamo traces; inference only) and `precision` (opt-in, changes
numerics: `tuner.precision`; in a space only with `tuner search --precision`).

A knob's `default` is Inductor's own default. A knob at its default is never patched,
so it never overrides what a mode preset sets.
"""
from __future__ import annotations

import functools
import math
import re
from types import MappingProxyType
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

from tuner.errors import SpaceError

KINDS = ("bool", "int", "float", "choice")
GROUPS = ("mode", "fusion", "tiling", "codegen", "layout", "memory", "autotune", "gemm", "wrapper", "trace",
          "precision")
SCOPES = ("any", "inference", "training")
SPECIAL = ("mode", "freezing", "precision")
FUNCTORCH_PREFIX = "functorch."


@dataclass(frozen=True)
class Knob:
    """One tunable setting and its domain.

    `parent` is `(knob_name, value)`: this knob is active only while the parent's
    effective value (the mode preset's setting, overridden by the parent knob when
    that is not at its default) equals `value`.
    `pattern` (a regex) admits any matching string in `validate_params`, for string
    knobs whose useful values depend on the machine (e.g. thread factors); the search
    still proposes only `choices`.
    `scope` limits a knob to inference or training workloads.
    `unsafe` knobs change numerics or make unchecked assumptions; a space includes
    them only when the user opts in.
    """

    name: str
    kind: str
    default: Any
    group: str
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    parent: tuple[str, Any] | None = None
    unsafe: bool = False
    scope: str = "any"
    pattern: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(f"knob {self.name!r}: {problem}")

    def problem(self) -> str | None:
        """Why this knob's own declaration is inconsistent, or None."""
        if not self.name or not isinstance(self.name, str):
            return "name must be a non-empty string"
        if self.kind not in KINDS:
            return f"kind {self.kind!r} is not one of {', '.join(KINDS)}"
        if self.group not in GROUPS:
            return f"group {self.group!r} is not one of {', '.join(GROUPS)}"
        if self.scope not in SCOPES:
            return f"scope {self.scope!r} is not one of {', '.join(SCOPES)}"
        if self.parent is not None and (not isinstance(self.parent, tuple) or len(self.parent) != 2
                                        or not isinstance(self.parent[0], str)):
            return "parent must be a (knob_name, value) pair"
        if self.parent is not None and self.parent[0] == self.name:
            return "a knob cannot be its own parent"
        if self.kind == "choice":
            if not self.choices:
                return "a choice knob needs at least one choice"
            if len(set(map(_json_key, self.choices))) != len(self.choices):
                return "choices repeat a value"
            for c in self.choices:
                if c is not None and not isinstance(c, (bool, int, float, str)):
                    return f"choice {c!r} is not a JSON scalar"
        elif self.kind in ("int", "float"):
            if self.low is None or self.high is None:
                return f"an {self.kind} knob needs low and high"
            if self.kind == "int" and not all(_is_int(v) for v in (self.low, self.high)):
                return "low and high of an int knob must be integers"
            if self.low > self.high:
                return f"low {self.low} is above high {self.high}"
            if self.log and self.low <= 0:
                return "a log-scaled range needs low > 0"
            if self.log and self.step not in (None, 1):
                return "log and step cannot be combined"
            if self.step is not None and self.step <= 0:
                return "step must be positive"
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                return f"pattern does not compile: {exc}"
        return self.value_problem(self.default, what="default")

    def value_problem(self, value: Any, *, what: str = "value") -> str | None:
        """Why `value` is not admissible for this knob, or None when it is."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                return f"{what} {value!r} is not a bool"
            return None
        if self.kind == "choice":
            if any(_same(value, c) for c in self.choices):
                return None
            if self.pattern is not None and isinstance(value, str) and re.fullmatch(self.pattern, value):
                return None
            shown = ", ".join(repr(c) for c in self.choices)
            return f"{what} {value!r} is not one of {shown}"
        if self.kind == "int" and not _is_int(value):
            return f"{what} {value!r} is not an int"
        if self.kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                     or not math.isfinite(value)):
            return f"{what} {value!r} is not a number"
        assert self.low is not None and self.high is not None
        if not self.low <= value <= self.high:
            return f"{what} {value!r} is outside [{self.low}, {self.high}]"
        if self.step is not None and self.kind == "int" and (value - self.low) % self.step:
            return f"{what} {value!r} is not on the step {self.step} from {self.low}"
        return None

    @property
    def is_special(self) -> bool:
        return self.name in SPECIAL

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form (the space file's knob entry)."""
        data = asdict(self)
        data["choices"] = list(self.choices)
        data["parent"] = list(self.parent) if self.parent is not None else None
        return data

    def identity(self) -> dict[str, Any]:
        """Everything that changes what the search proposes (hash input)."""
        data = self.to_json()
        del data["description"]
        return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps True apart from 1 and None apart from 0."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    return a == b


def same_value(a: Any, b: Any) -> bool:
    """Public form of the strict equality knobs use (True != 1)."""
    return _same(a, b)


# ---------------------------------------------------------------------------
# The installed torch


def torch_version() -> str:
    import torch

    return str(torch.__version__)


@functools.lru_cache(maxsize=None)
def mode_options(mode: str) -> Mapping[str, Any]:
    """The Inductor config a torch.compile mode preset sets (empty for "default").

    Raises ValueError when this torch does not know the mode.
    """
    import torch._inductor

    try:
        return MappingProxyType(dict(torch._inductor.list_mode_options(mode)))
    except RuntimeError as exc:
        raise ValueError(str(exc)) from exc


_MISSING = object()


def installed_default(name: str) -> Any:
    """Inductor's (or functorch's) default for a config knob; `_MISSING` if this torch lacks it.

    The default is the value the config module was initialised with (environment
    variables read at import included), not a value patched later in this process.
    """
    return _installed_defaults().get(name, _MISSING)


def installed_has(name: str) -> bool:
    if name in ("mode", "precision"):
        return True
    if name == "freezing":
        return installed_default("freezing") is not _MISSING and _dynamo_has_prepare_freezing()
    return installed_default(name) is not _MISSING


@functools.lru_cache(maxsize=1)
def _dynamo_has_prepare_freezing() -> bool:
    import torch._dynamo.config as dynamo_config

    return hasattr(dynamo_config, "prepare_freezing")


@functools.lru_cache(maxsize=1)
def _installed_defaults() -> dict[str, Any]:
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    out: dict[str, Any] = {}
    for prefix, module in (("", inductor_config), (FUNCTORCH_PREFIX, functorch_config)):
        current = module.get_config_copy()
        entries = getattr(module, "_config", {})
        for key, value in current.items():
            entry = entries.get(key)
            # entry.default is the import-time value; get_config_copy() would include
            # patches active right now, which must not move a knob's default.
            out[prefix + key] = getattr(entry, "default", value) if entry is not None else value
    return out


def resolve(knob: Knob) -> tuple[Knob | None, list[str]]:
    """Check one knob against the installed torch.

    Returns the knob to use (its default and domain aligned with this torch's default)
    and notices. A knob this torch lacks, or whose default has another type, comes back
    as None with a notice saying it was skipped; it never raises.
    """
    if knob.name == "mode":
        return _resolve_mode(knob)
    if knob.name == "precision":        # tuner's own knob (tuner.precision): nothing to check in torch
        return knob, []
    if not installed_has(knob.name):
        return None, [f"{knob.name} skipped: torch {torch_version()} has no such config"]
    have = installed_default(knob.name)
    if not _kind_fits(knob, have):
        return None, [f"{knob.name} skipped: torch {torch_version()} defaults it to {have!r} "
                      f"({type(have).__name__}), which does not fit a {knob.kind} knob"]
    if _same(have, knob.default):
        return knob, []
    notice = (f"{knob.name}: torch {torch_version()} defaults it to {have!r}, "
              f"not {knob.default!r}; the search uses {have!r} as the default")
    if knob.kind == "choice" and not any(_same(have, c) for c in knob.choices):
        return replace(knob, default=have, choices=(have, *knob.choices)), [notice]
    if knob.kind in ("int", "float"):
        assert knob.low is not None and knob.high is not None
        low, high = min(knob.low, have), max(knob.high, have)
        step = knob.step if knob.step is None or (have - low) % knob.step == 0 else None
        if knob.log and low <= 0:
            return None, [f"{knob.name} skipped: torch {torch_version()} defaults it to {have!r}, "
                          "outside its log-scaled range"]
        return replace(knob, default=have, low=low, high=high, step=step), [notice]
    return replace(knob, default=have), [notice]


def _kind_fits(knob: Knob, value: Any) -> bool:
    if knob.kind == "bool":
        return isinstance(value, bool)
    if knob.kind == "int":
        return _is_int(value)
    if knob.kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = {type(c) for c in knob.choices}
    return type(value) in kinds or (value is None and type(None) in kinds)


def _resolve_mode(knob: Knob) -> tuple[Knob | None, list[str]]:
    notices: list[str] = []
    kept = []
    for choice in knob.choices:
        try:
            options = mode_options(choice)
        except ValueError:
            notices.append(f"mode {choice!r} skipped: torch {torch_version()} does not know it")
            continue
        missing = [k for k in options if not installed_has(k)]
        if missing:
            notices.append(f"mode {choice!r} skipped: it sets {', '.join(missing)}, "
                           f"which torch {torch_version()} lacks")
            continue
        kept.append(choice)
    if not any(_same(knob.default, c) for c in kept):
        return None, notices + [f"mode skipped: its default {knob.default!r} is not usable here"]
    return replace(knob, choices=tuple(kept)), notices


def run_order(knobs: list[Knob]) -> list[Knob]:
    """`mode` first, then parents before children, otherwise keeping the given order
    (the define-by-run order a `SearchSpace` needs). SpaceError when parents form a cycle."""
    placed: list[Knob] = [k for k in knobs if k.name == "mode"]
    done = {k.name for k in placed}
    pending = [k for k in knobs if k.name != "mode"]
    while pending:
        ready = [k for k in pending if k.parent is None or k.parent[0] in done]
        if not ready:
            raise SpaceError("knob parents form a cycle: " + ", ".join(k.name for k in pending))
        first = ready[0]
        placed.append(first)
        done.add(first.name)
        pending.remove(first)
    return placed
