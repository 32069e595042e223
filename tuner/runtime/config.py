"""`RuntimeConfig`: the runtime knobs of one verdict, as a process applies them.

A stored verdict keeps its runtime knobs apart from its compile knobs (`BestConfig.runtime`,
e.g. `{"runtime.allocator": "jemalloc"}`); `RuntimeConfig.from_dict` checks them. Three places
apply them:
- a process that starts the model (`tuner run`, the search's timing processes): `start_env` gives
  the environment to start it with (the preloaded allocator resolved to the system's own library);
- a process already running (the backend, `tuner.compile`, emitted code): `apply_running` sets what
  can still change (glibc's malloc parameters) and says, one line each, what it cannot;
- every process of ours that times several variants (`pin_for_timing`): the allocator in a stated
  state that does not depend on what the process did before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tuner.errors import SpaceError, TunerError
from tuner.runtime import allocators
from tuner.runtime.knobs import ALLOCATOR, DEFAULT, KNOBS, RuntimeValue

__all__ = ["RuntimeConfig", "runtime_problem"]

PRELOAD = "LD_PRELOAD"


def runtime_problem(name: str, value: Any, device: str | None = None) -> str | None:
    """Why `name=value` is not a runtime knob setting tuner applies (on `device`, when given); None
    when it is. Never raises."""
    knob = KNOBS.get(name)
    if knob is None:
        return f"unknown runtime knob {name!r} (known: {', '.join(sorted(KNOBS))})"
    if not isinstance(value, str) or value not in knob.values:
        return f"{name}: value {value!r} is not one of {', '.join(repr(v) for v in knob.values)}"
    if device is not None and value != DEFAULT and knob.device != device:
        return f"{name} applies to {knob.device} platforms, not {device}"
    return None


@dataclass(frozen=True)
class RuntimeConfig:
    """Runtime knob settings other than their defaults, sorted by knob name."""

    values: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "RuntimeConfig":
        """Runtime knob settings by name (defaults dropped); SpaceError for an unknown knob or value."""
        chosen = []
        if not isinstance(values, Mapping):
            raise SpaceError(f"runtime knobs must be a mapping of name to value, got {type(values).__name__}")
        for name, value in sorted(values.items()):
            problem = runtime_problem(name, value)
            if problem is not None:
                raise SpaceError(f"invalid runtime knob: {problem}")
            if value != DEFAULT:
                chosen.append((name, value))
        return cls(tuple(chosen))

    @property
    def is_default(self) -> bool:
        return not self.values

    def params(self) -> dict[str, str]:
        return dict(self.values)

    def settings(self) -> list[tuple[str, str, RuntimeValue]]:
        return [(name, value, KNOBS[name].value(value)) for name, value in self.values]

    def label(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.values) or "runtime defaults"

    def unavailable(self) -> list[str]:
        """One line per setting that cannot run on this machine (an allocator not installed)."""
        out = []
        for name, value, setting in self.settings():
            if setting.preload is not None and not allocators.available(setting.preload):
                out.append(f"{name}={value}: {setting.preload} is not installed here ({setting.description})")
            elif setting.mallopt and allocators.glibc() is None:
                out.append(f"{name}={value}: this process's C library is not glibc")
        return out

    def start_env(self, base: Mapping[str, str], *, in_process: bool = False) -> dict[str, str]:
        """`base` with what a process must start with for these settings: the environment of each,
        and the allocator preloaded (its system library first on LD_PRELOAD). With `in_process`,
        leave out the environment of what the process will set itself (`pin_for_timing`: glibc's
        parameters). TunerError naming the fix when an allocator is not installed here."""
        env = dict(base)
        for line in self.unavailable():
            raise TunerError(f"cannot apply {line}; install it, or search again on this machine")
        for _, _, setting in self.settings():
            if not (in_process and setting.mallopt):
                env.update(setting.env)
            if setting.preload is not None:
                path = str(allocators.library(setting.preload))
                rest = [p for p in env.get(PRELOAD, "").replace(":", " ").split() if p != path]
                env[PRELOAD] = " ".join([path, *rest])
        return env

    def start_only(self) -> list[tuple[str, str]]:
        """The settings that take effect only in a process started with them."""
        return [(name, value) for name, value, setting in self.settings() if setting.needs_start and not setting.mallopt]

    def apply_running(self, process_env: Mapping[str, str]) -> list[str]:
        """Set in this running process what can still be set (glibc's malloc parameters); one line
        for each setting that is not in effect and cannot be (`process_env`: the variables this
        process started with, `tuner.settings.Settings.process_env`)."""
        missing = []
        for name, value, setting in self.settings():
            if setting.mallopt:
                if not allocators.mallopt(setting.mallopt):
                    missing.append(f"{name}={value} (this process's C library is not glibc)")
            elif setting.preload is not None:
                if not allocators.loaded(setting.preload):
                    missing.append(f"{name}={value} (it must be preloaded when the process starts)")
            elif any(process_env.get(k) != v for k, v in setting.env):
                shown = " ".join(f"{k}={v}" for k, v in setting.env)
                missing.append(f"{name}={value} ({shown} must be set when the process starts)")
        return missing

    def pin_for_timing(self) -> None:
        """In a process of ours that times several variants (a trial, a confirmation): the allocator in
        a stated state that nothing run before moves. With the default allocator, glibc keeping freed
        memory for reuse (glibc-retain's parameters, set explicitly, which also turns its dynamic
        threshold off): after warm-up every call reuses heap memory, whatever the references or the
        other variants freed, so compile configs are compared with the allocator out of the way. (glibc's
        own defaults, pinned, would be as history-free, but every block over 128 KiB page-faults afresh
        each call: slower than any state a user's process is in.) A preloaded allocator is left as it is;
        the allocator itself is a runtime knob, measured in fresh processes."""
        allocator = dict(self.values).get(ALLOCATOR, DEFAULT)
        if allocator in (DEFAULT, "glibc-retain"):
            allocators.mallopt(KNOBS[ALLOCATOR].value("glibc-retain").mallopt)
