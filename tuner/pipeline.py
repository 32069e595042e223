"""Deprecated: `tuner.pipeline` moved to `tuner.search`; this name stays for one release."""
import warnings

from tuner.search import Execution, MeasureSpec, SearchEvents, SearchOptions, SearchResult, prepare_target, run_search

warnings.warn("tuner.pipeline is now tuner.search: import run_search and its options from there",
              DeprecationWarning, stacklevel=2)

__all__ = ["Execution", "MeasureSpec", "SearchEvents", "SearchOptions", "SearchResult", "prepare_target", "run_search"]
