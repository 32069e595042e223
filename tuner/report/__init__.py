"""`tuner report`: a self-contained HTML page (and PNG figures) about one model's tuning.

`load_report_data` reads the store (read-only suffices), `profile_best` profiles the kept
config against the default compile, `write_report` draws the figures and writes the page.
`compare_applied` (`tuner compare`) times the default compile, `backend="tuner"` and
`tuner.compile` side by side in this process, and `user_view` each path in fresh processes.
`portable_verdict` turns a stored verdict into code that applies it with torch alone and
`render_portable` prints it (`tuner best --emit`).
`optuna_study` rebuilds the stored trials as an Optuna study, for the importances and
`tuner dashboard`. torch, matplotlib and Optuna load only inside the functions that use them.
"""
from typing import Any

from tuner.report.applied import AppliedPath, Comparison, check_rounds, compare_applied
from tuner.report.data import ReportData, load_report_data
from tuner.report.page import Written, write_report
from tuner.report.portable import Portable, portable_verdict
from tuner.report.portable import render as render_portable
from tuner.report.profile import ProfileResult, profile_best
from tuner.report.user_view import PATHS as USER_PATHS
from tuner.report.user_view import FreshView, user_view

__all__ = ["AppliedPath", "Comparison", "FreshView", "ProfileResult", "ReportData", "USER_PATHS", "Written",
           "check_rounds", "compare_applied", "load_report_data", "optuna_study", "Portable", "portable_verdict",
           "profile_best", "render_portable", "user_view", "write_report"]


def __getattr__(name: str) -> Any:
    if name == "optuna_study":      # study_export imports Optuna at module level
        from tuner.report.study_export import optuna_study

        return optuna_study
    raise AttributeError(f"module 'tuner.report' has no attribute {name!r}")
