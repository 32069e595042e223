"""`tuner report`: a self-contained HTML page (and PNG figures) about one model's tuning.

`load_report_data` reads the store (read-only suffices), `profile_best` profiles the kept
config against the default compile, `write_report` draws the figures and writes the page.
torch, matplotlib and Optuna load only inside the functions that use them.
"""
from tuner.report.data import ReportData, load_report_data
from tuner.report.page import Written, write_report
from tuner.report.profile import ProfileResult, profile_best

__all__ = ["ProfileResult", "ReportData", "Written", "load_report_data", "profile_best", "write_report"]
