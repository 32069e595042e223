"""`tuner report MODEL --out DIR`: a self-contained HTML page about what the database holds for
a model file here, with its figures as PNG files beside it.

Captures the model file's workload as `tuner best` does and reads the store only, so a
database the tuner cannot write (a read-only file, a read-only role) suffices. With nothing
stored for the model, it fails with one line naming the search to run. The operator profile
compiles and runs the model twice in this process; `--no-profile` skips it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.cli.common import add_command, add_db_option
from tuner.errors import TunerError, UsageError
from tuner.settings import Settings

if TYPE_CHECKING:
    from tuner.report import ProfileResult


def add_report_parser(subparsers: Any) -> None:
    r = add_command(subparsers, "report", cmd_report,
                    help="write an HTML report (figures, kept config, operator profile) of a model file's tuning")
    r.add_argument("model")
    r.add_argument("--out", metavar="DIR", default="report",
                   help="folder for index.html and the PNG figures (default: report)")
    r.add_argument("--no-profile", action="store_true",
                   help="skip the operator profile (it compiles and runs the model twice here)")
    add_db_option(r)


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.report import load_report_data, profile_best, write_report
    from tuner.search import prepare_target
    from tuner.storage import Store

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for index.html and the figures")
    target = prepare_target(args.model)
    with Store.open(settings.db_url, readonly=True) as store:
        data = load_report_data(args.model, target, store)
    profile: ProfileResult | str
    if args.no_profile:
        profile = "skipped (--no-profile)"
    elif not data.bests:
        profile = "no kept config to profile yet; finish the search first"
    elif all(best.is_default for best in data.bests):
        profile = "nothing to profile: Inductor's defaults were kept, so the tuned model is the default compile"
    else:
        print("profiling the kept config against the default compile (both compile here; "
              "--no-profile skips this)", file=sys.stderr)
        profile = profile_best(args.model, settings.db_url)
    try:
        written = write_report(data, out, profile=profile)
    except OSError as exc:
        raise TunerError(f"cannot write the report into {out} ({exc.strerror or exc}); "
                         f"choose a writable folder with --out") from exc
    print(f"wrote {written.index}")
    if written.figures:
        print(f"figures: {', '.join(str(out / name) for name in written.figures)}")
    return 0
