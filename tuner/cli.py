"""The `tuner` command line. Errors print `error: ...` on one line and exit 1 (2 for usage)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import traceback
from pathlib import Path
from typing import Callable

from tuner.errors import TunerError, UsageError
from tuner.explain import add_explain_parser
from tuner.settings import Settings
from tuner.sharing import add_db_commands

Command = Callable[[argparse.Namespace, Settings], int]


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="URL", help="database URL (default: $TUNER_DB or the per-user SQLite file)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tuner", description="Autotune torch.compile by measurement.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("search", help="search compile configs for a model file and store the best")
    s.add_argument("model", help="Python file defining get_model() and get_inputs()")
    s.add_argument("--trials", type=int, default=30, help="trials in the study (default 30)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--sampler", default="tpe", help="tpe (default) or random")
    s.add_argument("--timeout", type=float, default=None, metavar="S", help="deadline per trial in seconds")
    s.add_argument("--space", metavar="FILE", help="JSON search-space file (default: the built-in space)")
    s.add_argument("--unsafe", action="store_true", help="include knobs that change numerics")
    s.add_argument("--resume", action="store_true", help="continue the last study of this model and platform")
    s.add_argument("--workers", type=int, default=1, help="trials in flight at once (default 1)")
    s.add_argument("--executor", default=None, help="ray (default when installed) or local")
    s.add_argument("--address", default=None, help="Ray cluster address (implies --executor ray)")
    s.add_argument("--platform", default=None, metavar="KEY",
                   help="platform key to tune for (a Ray node must advertise it), or 'all' in the cluster")
    s.add_argument("--repeat", type=int, default=20, help="timed samples per trial (default 20)")
    s.add_argument("--rounds", type=int, default=15, help="paired rounds when confirming finalists (default 15)")
    s.add_argument("--threads", type=int, default=None, help="torch threads while measuring")
    _add_db(s)
    s.set_defaults(func=cmd_search)

    b = sub.add_parser("best", help="print the stored best config of a model file")
    b.add_argument("model")
    _add_db(b)
    b.set_defaults(func=cmd_best)

    t = sub.add_parser("trials", help="list every stored trial of a model file")
    t.add_argument("model")
    _add_db(t)
    t.set_defaults(func=cmd_trials)

    db = sub.add_parser("db", help="database commands")
    dbsub = db.add_subparsers(dest="db_command", required=True, metavar="DBCOMMAND")
    up = dbsub.add_parser("upgrade", help="create or migrate the database schema")
    _add_db(up)
    up.set_defaults(func=cmd_db_upgrade)
    add_db_commands(dbsub)          # export, import, merge, ls
    add_explain_parser(sub)         # explain MODEL: which stored config applies
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if getattr(args, "db", None):
        settings = dataclasses.replace(settings, db_url=args.db)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        return args.func(args, settings)
    except TunerError as exc:
        if args.debug or settings.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted; finished trials are stored, continue with --resume", file=sys.stderr)
        return 130


def _open_store(settings: Settings, *, create: bool = False, readonly: bool = False):
    """Open the database; with `create`, a database with no tuner schema yet gets the current one.

    An existing schema is never migrated implicitly: an old one is refused with the command to run.
    """
    from tuner.storage import Store, ensure_schema
    if create:
        ensure_schema(settings.db_url)
    return Store.open(settings.db_url, readonly=readonly)


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.pipeline import prepare_target
    from tuner.search import make_sampler
    from tuner.workers.executor import get_executor

    if args.trials < 1:
        raise UsageError(f"--trials must be at least 1, got {args.trials}")
    make_sampler(args.sampler, args.seed)          # a bad --sampler fails before any work
    executor_name = _executor_name(args)
    threads = args.threads or settings.threads
    target = prepare_target(args.model, space_path=args.space, include_unsafe=args.unsafe, threads=threads, seed=args.seed)
    for notice in target.space.notices:
        print(f"notice: {notice}", file=sys.stderr)
    store = _open_store(settings, create=True)
    store.check_writable()                      # a read-only role stops here, before any trial
    executor = get_executor(executor_name, workers=args.workers, address=args.address or settings.ray_address,
                            platform_key=target.platform.key, device=target.platform.device)
    try:
        platforms = _target_platforms(args.platform, executor, target)
        codes = [_search_one(args, settings, dataclasses.replace(target, platform=platform), store, executor)
                 for platform in platforms]
    finally:
        executor.close()
    return max(codes)


def _executor_name(args: argparse.Namespace) -> str:
    """Ray (a local cluster, or the one at --address) unless --executor says otherwise."""
    if args.executor == "local" and (args.address or args.platform):
        raise UsageError("--address and --platform need Ray; drop --executor local")
    return args.executor or "ray"


def _target_platforms(wanted: str | None, executor, target) -> list:
    """The platforms to tune for: this machine's, the one --platform names, or all in the cluster."""
    if not wanted:
        return [target.platform]
    if not hasattr(executor, "platforms"):
        raise UsageError("--platform needs Ray: add --executor ray (or --address ADDRESS)")
    from tuner.workers.placement import describe_platform
    present = executor.platforms()
    keys = sorted(present) if wanted == "all" else [wanted]
    missing = [k for k in keys if k not in present and k != target.platform.key]
    if missing or not keys:
        raise UsageError(f"no Ray node advertises platform {', '.join(missing) or wanted}; "
                         f"platforms present: {', '.join(sorted(present)) or 'none'}")
    platforms = [target.platform if k == target.platform.key else describe_platform(k) for k in keys]
    for platform in platforms:
        if platform.device != target.platform.device:
            raise UsageError(f"platform {platform.key} is a {platform.device} platform but the model runs on "
                             f"{target.platform.device}; pick a {target.platform.device} platform or change DEVICE")
    return platforms


def _search_one(args: argparse.Namespace, settings: Settings, target, store, executor) -> int:
    """One search for one platform, with progress, then its summary table."""
    from tuner.pipeline import tune
    from tuner.report import Progress, summary_table
    from tuner.search import SearchJob

    # Absolute: trial processes run in their own scratch folders (and Ray nodes elsewhere).
    job = SearchJob(model_path=str(Path(args.model).resolve()), trials=args.trials, seed=args.seed, sampler=args.sampler,
                    timeout_s=args.timeout or settings.trial_timeout_s, resume=args.resume, repeat=args.repeat,
                    threads=args.threads or settings.threads, rounds=args.rounds,
                    test_faults=tuple(sorted(settings.test_faults.items())))
    print(f"tuning {target.workload.name} ({len(target.workload.graphs)} graph(s), workload {target.workload.key[:12]}) "
          f"on {target.platform.describe()} [platform {target.platform.key[:12]}]; database {store.safe_url}",
          file=sys.stderr)
    resumed = store.last_study(target.workload.key, target.platform.key) if args.resume else None
    progress = Progress(args.trials, done=len(store.trials(resumed.id)) if resumed else 0)
    try:
        result = tune(job, target, store=store, executor=executor, user=settings.user, on_result=progress.update)
    finally:
        progress.close()
    if result.verdict is None:
        print("no trial ran correctly: Inductor's defaults stay; see `tuner trials` for the errors")
        return 1
    if result.outcome.exhausted:
        print("note: the search space ran out of new candidates before --trials was reached", file=sys.stderr)
    print(summary_table(result.verdict))
    return 0


def _workload_of(model: str):
    from tuner.pipeline import prepare_target
    return prepare_target(model)


def cmd_best(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.report import best_text
    target = _workload_of(args.model)
    store = _open_store(settings, readonly=True)
    bests = store.workload_best(target.workload.key, target.platform.key)
    if not bests:
        print(f"no stored config for {args.model} on {target.platform.describe()}; "
              f"run: tuner search {args.model}", file=sys.stderr)
        return 1
    print(best_text(bests[0]))
    return 0


def cmd_trials(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.report import trials_table
    target = _workload_of(args.model)
    store = _open_store(settings, readonly=True)
    rows = store.trials_for_workload(target.workload.key, target.platform.key)
    if not rows:
        print(f"no stored trials for {args.model} on this platform; run: tuner search {args.model}", file=sys.stderr)
        return 1
    for study_id in sorted({study.id for study, _ in rows}):
        study = next(s for s, _ in rows if s.id == study_id)
        print(f"study {study.id} ({study.created_at:%Y-%m-%d %H:%M}, sampler {study.sampler}, seed {study.seed})")
        print(trials_table([r for s, r in rows if s.id == study_id]))
    return 0


def cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage.migrate import current_revision, upgrade
    from tuner.storage.urls import safe_url
    before = current_revision(settings.db_url)
    upgrade(settings.db_url)
    after = current_revision(settings.db_url)
    print(f"{safe_url(settings.db_url)}: schema {before or 'empty'} -> {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
