"""The space of a `tuner.autotune` kernel: value lists per name, filtered by a constraint.

Declared once per decorator (`KernelSpace.declare`, which checks the names and values) and
enumerated once per process, at the kernel's first launch: the cartesian product of the
value lists in declaration order, each combination offered to the constraint before any
config is launched. The space hash covers the configs that pass, so a change to the value
lists or to the constraint gives the kernel new keys (and a new search).
"""
from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from tuner.errors import UsageError
from tuner.keys import canonical_json

Scalar = Union[bool, int, float, str]
Config = dict[str, Scalar]
Constraint = Callable[[Config], bool]

# Triton's launch options a config may set besides the kernel's constexpr parameters.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
MAX_COMBINATIONS = 1_000_000      # the product is enumerated in full: keep it affordable
SPACE_HASH_LEN = 32


def is_scalar(value: object) -> bool:
    """A JSON scalar a config may hold: a bool, an int, a finite float or a string."""
    return isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))


@dataclass(frozen=True)
class KernelSpace:
    """Names (constexpr parameters of the kernel, or Triton launch options), each with its
    values in declaration order, and an optional constraint over a whole config."""

    names: tuple[str, ...]
    values: tuple[tuple[Scalar, ...], ...]
    constraint: Constraint | None = None

    @classmethod
    def declare(cls, space: Mapping[str, Sequence[Scalar]], arg_names: Sequence[str],
                constraint: Constraint | None = None) -> "KernelSpace":
        """Check a declared space against the kernel's parameters. Raises UsageError, naming
        the fix, for an empty space, a name that is neither a kernel parameter nor a launch
        option, an empty or repeated value list, or a value that is not a JSON scalar."""
        if not space:
            raise UsageError("tuner.autotune needs a non-empty space, e.g. "
                             "space={'BLOCK': [64, 128], 'num_warps': [4, 8]}")
        for name, values in space.items():
            if name not in arg_names and name not in LAUNCH_OPTIONS:
                raise UsageError(f"space name {name!r} is neither a parameter of the kernel "
                                 f"({', '.join(arg_names)}) nor a launch option "
                                 f"({', '.join(LAUNCH_OPTIONS)}); fix the space")
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise UsageError(f"space[{name!r}] must be a non-empty list of values, "
                                 f"got {values!r}")
            bad = [v for v in values if not is_scalar(v)]
            if bad:
                raise UsageError(f"space[{name!r}] holds {bad[0]!r}, not a JSON scalar; use "
                                 f"bools, ints, finite floats or strings")
            if len({canonical_json(v) for v in values}) != len(values):
                raise UsageError(f"space[{name!r}] repeats a value: {list(values)!r}")
        if constraint is not None and not callable(constraint):
            raise UsageError(f"constraint must be a function of one config dict, got {constraint!r}")
        return cls(names=tuple(space), values=tuple(tuple(v) for v in space.values()),
                   constraint=constraint)

    @property
    def size(self) -> int:
        """How many combinations the value lists make, before the constraint."""
        return math.prod(len(v) for v in self.values)

    def configs(self) -> tuple[Config, ...]:
        """Every combination that passes the constraint, in declaration order. Calls the
        constraint once per combination (with a fresh dict) and launches nothing. Raises
        UsageError when the product is too large or the constraint rejects everything."""
        if self.size > MAX_COMBINATIONS:
            raise UsageError(f"the space has {self.size} combinations, more than "
                             f"{MAX_COMBINATIONS}; shorten its value lists")
        found = []
        for combination in itertools.product(*self.values):
            config = dict(zip(self.names, combination))
            if self.constraint is None or self.constraint(dict(config)):
                found.append(config)
        if not found:
            raise UsageError(f"the constraint rejects all {self.size} combinations of the space; "
                             f"loosen it or widen the value lists")
        return tuple(found)

    def check(self, config: Mapping[str, object]) -> str | None:
        """Why a stored config is not a config of this space; None when it is one."""
        if set(config) != set(self.names):
            return f"its names {sorted(config)} are not the space's {sorted(self.names)}"
        for name, values in zip(self.names, self.values):
            value = config[name]
            if not is_scalar(value) or canonical_json(value) not in {canonical_json(v) for v in values}:
                return f"{name}={value!r} is not among the declared values {list(values)!r}"
        if self.constraint is not None and not self.constraint(dict(config)):
            return "the constraint rejects it"
        return None


def space_hash(configs: Sequence[Config]) -> str:
    """The hash of the configs that pass the constraint, in order."""
    return hashlib.sha256(canonical_json(list(configs)).encode()).hexdigest()[:SPACE_HASH_LEN]
