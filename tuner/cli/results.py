"""`tuner best MODEL` and `tuner trials MODEL`: what the database holds for a model file here.

Both capture the model file's workload as `tuner search` does and read the store only.
A model with nothing stored is not an error of the database: it prints what to run, exit 1.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from tuner.cli.common import add_command, add_db_option
from tuner.settings import Settings


def add_results_parsers(subparsers: Any) -> None:
    b = add_command(subparsers, "best", cmd_best, help="print the stored best config of a model file")
    b.add_argument("model")
    add_db_option(b)
    t = add_command(subparsers, "trials", cmd_trials, help="list every stored trial of a model file")
    t.add_argument("model")
    add_db_option(t)


def cmd_best(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.cli.report import best_text
    from tuner.pipeline import prepare_target
    from tuner.storage import Store

    target = prepare_target(args.model)
    with Store.open(settings.db_url, readonly=True) as store:
        bests = store.workload_best(target.workload.key, target.platform.key)
    if not bests:
        print(f"no stored config for {args.model} on {target.platform.describe()}; "
              f"run: tuner search {args.model}", file=sys.stderr)
        return 1
    print(best_text(bests[0]))
    return 0


def cmd_trials(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.cli.report import trials_table
    from tuner.pipeline import prepare_target
    from tuner.storage import Store

    target = prepare_target(args.model)
    with Store.open(settings.db_url, readonly=True) as store:
        rows = store.trials_for_workload(target.workload.key, target.platform.key)
    if not rows:
        print(f"no stored trials for {args.model} on this platform; run: tuner search {args.model}", file=sys.stderr)
        return 1
    for study_id in sorted({study.id for study, _ in rows}):
        study = next(s for s, _ in rows if s.id == study_id)
        print(f"study {study.id} ({study.created_at:%Y-%m-%d %H:%M}, sampler {study.sampler}, seed {study.seed})")
        print(trials_table([r for s, r in rows if s.id == study_id]))
    return 0
