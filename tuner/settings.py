"""The one place that reads the environment.

`Settings.from_env()` reads every `TUNER_*` variable; CLI flags override fields
with `dataclasses.replace`. Nothing else in tuner calls `os.environ.get`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def default_db_url() -> str:
    """The per-user SQLite file that both search and compile-time lookup use."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'tuner' / 'tuner.db'}"


def _login_name() -> str:
    """The account name when USER/LOGNAME are unset (services, containers)."""
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return "unknown"


# The variables a process reads once, as it starts, that runtime knobs set (`tuner.runtime.knobs`):
# the backend reads them to tell whether a stored runtime knob is in effect in this process.
PROCESS_VARIABLES = ("LD_PRELOAD", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "OMP_WAIT_POLICY",
                     "OMP_PROC_BIND", "OMP_PLACES", "PYTORCH_CUDA_ALLOC_CONF")


@dataclass(frozen=True)
class Settings:
    """Every knob of tuner itself (not of Inductor). Frozen: derive with `replace`."""

    db_url: str = field(default_factory=default_db_url)
    explain: bool = False                    # TUNER_EXPLAIN: print the lookup decision per graph
    lookup_timeout_s: float = 2.0            # TUNER_LOOKUP_TIMEOUT: budget for a compile-time lookup
    trial_timeout_s: float = 300.0           # TUNER_TRIAL_TIMEOUT: per-trial deadline
    threads: int | None = None               # TUNER_THREADS: torch threads for measurement
    ray_address: str | None = None           # RAY_ADDRESS (Ray's own variable) or TUNER_RAY_ADDRESS
    ray_auth_mode: str | None = None         # RAY_AUTH_MODE (Ray's own): "disabled" refuses a local cluster
    user: str = ""                           # provenance: USER / LOGNAME
    cuda_visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES (CUDA's own): the GPUs torch sees, in order
    debug: bool = False                      # TUNER_DEBUG: tracebacks on errors
    process_env: tuple[tuple[str, str], ...] = ()   # PROCESS_VARIABLES as this process started with them

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        """Read the environment once. Unset variables keep the defaults."""
        env = dict(os.environ if env is None else env)
        threads = env.get("TUNER_THREADS")
        return cls(
            db_url=env.get("TUNER_DB") or default_db_url(),
            explain=env.get("TUNER_EXPLAIN", "") not in ("", "0", "false", "no"),
            lookup_timeout_s=float(env.get("TUNER_LOOKUP_TIMEOUT", "2.0")),
            trial_timeout_s=float(env.get("TUNER_TRIAL_TIMEOUT", "300")),
            threads=int(threads) if threads else None,
            ray_address=env.get("TUNER_RAY_ADDRESS") or env.get("RAY_ADDRESS") or None,
            ray_auth_mode=env.get("RAY_AUTH_MODE") or None,
            user=env.get("USER") or env.get("LOGNAME") or _login_name(),
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            debug=env.get("TUNER_DEBUG", "") not in ("", "0", "false", "no"),
            process_env=tuple((name, env[name]) for name in PROCESS_VARIABLES if name in env),
        )
