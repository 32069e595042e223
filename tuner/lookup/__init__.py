"""Compile time: `backend="tuner"`, `tuner.compile` and `tuner.install`, in the user's process.

`tuner_backend` (the `torch_dynamo_backends` entry point) fingerprints each graph, asks `Lookup`
(the read-only store behind one guard, cached per process) for its best config on this platform,
the tier rules (`decision`: exact, same hardware, nearest bucket, or none) decide, and the backend
compiles through `tuner.inductor` what was measured (`choice`), feeding Inductor's autotuning the
stored kernel choices (`kernel_feed`); `explain_graph` words the decision for `tuner explain` and
`TUNER_EXPLAIN`; a dynamic graph tuned at several shape buckets gets a `Dispatcher` of per-bucket
copies (`dispatch`). A miss or any database problem compiles with Inductor's defaults and says so
once (`LookupWarning`). `api` (`tuner.compile`, `tuner.install`) is listed but imported only when
used: it loads torch, and `import tuner.lookup` does not.

The face exports what other packages and users name: the root face (`api`), the entry point,
`tuner explain` and `tuner compare` (`Lookup`, `explain_graph`, `format_explanation`, `short`,
`reset_process_lookup`) and the warning users filter. Tests import the inner modules.
"""
from tuner.lookup.backend import tuner_backend
from tuner.lookup.database import LookupWarning
from tuner.lookup.decision import short
from tuner.lookup.explanation import explain_graph, format_explanation
from tuner.lookup.lookup import Lookup, reset_process_lookup

__all__ = [
    "Lookup",
    "LookupWarning",
    "api",
    "explain_graph",
    "format_explanation",
    "reset_process_lookup",
    "short",
    "tuner_backend",
]
