"""Storage: the tuner database (SQLite or PostgreSQL), its schema migrations and records.

`Store` is the only code that opens sessions; it returns the frozen records below, and the
functions re-exported here each run in one of its sessions (kernel configs, learned failures,
warm starts, the cost model's examples, exchange files). The migrations ship as
`tuner.migrations`; `upgrade` runs them without an alembic.ini. Everything but the store, its
records and URLs loads on first use, so compile-time lookups never import alembic.

Over 20 names: every floor above reads or writes the database (kernels, inductor, lookup, search,
report and cli), each through its own few of: the Store and the records it returns, URLs,
migrations, exchange files, the bounded call, the row checks, and one group of functions per
table outside the Store (kernel configs, learned failures, warm starts, the cost model's
examples); each name is imported by one of those packages. What only tests use (`Snapshot`,
`HistoryEntry`, `CheckReport`, `import_file`, `downgrade`, `head_revision`) they import from the
inner modules.
"""
from typing import Any

from tuner.storage.bounded import within
from tuner.storage.check import check_database
from tuner.storage.records import ApplyReport, BestConfig, FailureRule, KernelConfig, StudyInfo, TrialRecord
from tuner.storage.store import Store
from tuner.storage.urls import handed_on, parse_url, safe_url, sqlite_path

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "current_revision": "migrate", "ensure_schema": "migrate", "upgrade": "migrate",
    "find_kernel_config": "kernel_table", "kernel_configs": "kernel_table", "save_kernel_config": "kernel_table",
    "failure_rules": "failures", "refresh_rules": "failures",
    "other_platform_bests": "warm_starts", "tuned_workloads": "warm_starts",
    "device_trials": "training_data", "workload_codes": "training_data",
    "export_file": "exchange", "merge": "exchange", "read_file": "exchange",
    "best_problem": "trust", "kernel_problem": "trust", "triton_config_problem": "trust",
}

__all__ = [
    "ApplyReport",
    "BestConfig",
    "FailureRule",
    "KernelConfig",
    "Store",
    "StudyInfo",
    "TrialRecord",
    "best_problem",
    "check_database",
    "current_revision",
    "device_trials",
    "ensure_schema",
    "export_file",
    "failure_rules",
    "find_kernel_config",
    "handed_on",
    "kernel_configs",
    "kernel_problem",
    "merge",
    "other_platform_bests",
    "parse_url",
    "read_file",
    "refresh_rules",
    "safe_url",
    "save_kernel_config",
    "sqlite_path",
    "triton_config_problem",
    "tuned_workloads",
    "upgrade",
    "within",
    "workload_codes",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"tuner.storage.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'tuner.storage' has no attribute {name!r}")
