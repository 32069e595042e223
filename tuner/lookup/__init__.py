"""Compile time: `backend="tuner"`, `tuner.compile` and `tuner.install`, in the user's process.

`tuner_backend` (the `torch_dynamo_backends` entry point) fingerprints each graph, asks `Lookup`
(the read-only store behind one guard, cached per process) for its best config on this platform,
`decide_tier` picks the tier (exact, same hardware, nearest bucket, or none) and the backend
compiles through `tuner.inductor` with what was measured; `explain_graph` words the decision for
`tuner explain` and `TUNER_EXPLAIN`; a dynamic graph tuned at several shape buckets gets a
`Dispatcher` of per-bucket copies. A miss or any database problem compiles with Inductor's
defaults and says so once (`LookupWarning`). `api` (`tuner.compile`, `tuner.install`) is listed
but imported only when used: it loads torch, and `import tuner.lookup` does not.
"""
from tuner.lookup.backend import TunerBackend, tuner_backend
from tuner.lookup.decision import (NO_UNFROZEN, Applies, Decision, StoredElsewhere, Tier, backend_choice, decide_tier,
                                   short, unfrozen_label)
from tuner.lookup.dispatch import Dispatcher, bind
from tuner.lookup.explanation import Explanation, explain_graph, format_explanation, print_explanation
from tuner.lookup.lookup import GraphLookup, Lookup, LookupWarning, process_lookup, reset_process_lookup

__all__ = [
    "NO_UNFROZEN",
    "Applies",
    "Decision",
    "Dispatcher",
    "Explanation",
    "GraphLookup",
    "Lookup",
    "LookupWarning",
    "StoredElsewhere",
    "Tier",
    "TunerBackend",
    "api",
    "backend_choice",
    "bind",
    "decide_tier",
    "explain_graph",
    "format_explanation",
    "print_explanation",
    "process_lookup",
    "reset_process_lookup",
    "short",
    "tuner_backend",
    "unfrozen_label",
]
