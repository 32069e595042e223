"""`tuner db upgrade | check | export | import | merge | ls`: the schema, the database's
health, and sharing best configs between databases and people.

Each command prints databases through `safe_url` only, and reports problems as TunerError (one line).
"""
from __future__ import annotations

import argparse
import socket
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.cli.common import add_command, add_db_option, format_table, runtime_label
from tuner.errors import UsageError
from tuner.settings import Settings

if TYPE_CHECKING:
    from tuner.storage import ApplyReport, BestConfig, FailureRule, Store

THIN_ROUNDS = 10


def add_db_parser(subparsers: Any) -> None:
    """Add `db` and its subcommands to the CLI's commands."""
    db = add_command(subparsers, "db", None, help="database commands")
    dbsub = db.add_subparsers(dest="db_command", required=True, metavar="DBCOMMAND")
    up = add_command(dbsub, "upgrade", cmd_db_upgrade, help="create or migrate the database schema")
    add_db_option(up)

    c = add_command(dbsub, "check", cmd_db_check,
                    help="check the database's integrity and schema, and count its rows (changes nothing)")
    add_db_option(c)

    e = add_command(dbsub, "export", cmd_db_export, help="write best configs to a JSON exchange file")
    e.add_argument("--out", required=True, metavar="FILE", help="the exchange file to write")
    e.add_argument("--workload", metavar="KEY", help="only this workload (key, key prefix or model name)")
    e.add_argument("--platform", metavar="KEY", help="only this platform (key or key prefix)")
    add_db_option(e)

    i = add_command(dbsub, "import", cmd_db_import, help="validate an exchange file, then store it (all or nothing)")
    i.add_argument("file", help="a file written by `tuner db export`")
    add_db_option(i)

    m = add_command(dbsub, "merge", cmd_db_merge, help="pull the best configs of another database into this one")
    m.add_argument("url", metavar="SOURCE_URL", help="the database to read (it is never written)")
    add_db_option(m)

    ls = add_command(dbsub, "ls", cmd_db_ls, help="best configs by workload and platform, with their evidence")
    ls.add_argument("--workload", metavar="KEY", help="only this workload (key, key prefix or model name)")
    ls.add_argument("--platform", metavar="KEY", help="only this platform (key or key prefix)")
    add_db_option(ls)


def cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage import current_revision, parse_url, safe_url, sqlite_path, upgrade

    path = sqlite_path(parse_url(settings.db_url))
    # A SQLite file that does not exist yet has no schema; reading it would refuse the missing file.
    before = None if path is not None and not path.exists() else current_revision(settings.db_url)
    upgrade(settings.db_url)
    after = current_revision(settings.db_url)
    print(f"{safe_url(settings.db_url)}: schema {before or 'empty'} -> {after}")
    return 0


def cmd_db_check(args: argparse.Namespace, settings: Settings) -> int:
    """Print what `check_database` found; exit 0 when healthy, else 1 with the first problem
    (it names the fix) as the `error:` line."""
    from tuner.storage import check_database

    report = check_database(settings.db_url)
    print("\n".join(report.lines()))
    if report.ok:
        return 0
    problem = report.problems[0] if report.problems else f"database {report.url} is {report.status}"
    print(f"error: {problem}", file=sys.stderr)
    return 1


def cmd_db_export(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage import Store, export_file
    from tuner.version import __version__

    with Store.open(settings.db_url, readonly=True) as store:
        workloads, platforms = _selection(store, args.workload, args.platform)
        report = export_file(store, args.out, workload_keys=workloads, platform_keys=platforms,
                             user=settings.user, host=socket.gethostname(),
                             tuner_version=__version__)
    extras = [_n(n, noun) for n, noun in ((report.rules, "learned failure rule"), (report.kernels, "kernel config")) if n]
    rules = f", with {' and '.join(extras)}" if extras else ""
    print(f"exported {_n(report.records, 'best config')} ({_n(report.workloads, 'workload')}, "
          f"{_n(report.platforms, 'platform')}) from {store.safe_url} to {report.path} "
          f"({report.checksum[:19]}...){rules}")
    return 0


def cmd_db_import(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage import Store, ensure_schema, read_file

    snapshot = read_file(args.file)                 # validated whole before anything is opened
    ensure_schema(settings.db_url)
    with Store.open(settings.db_url) as store:
        store.check_writable()
        report = store.apply_snapshot(snapshot, source="import", origin=_basename(args.file))
    print(f"imported {args.file} into {store.safe_url}: {_applied(report)}")
    return 0


def cmd_db_merge(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage import Store, ensure_schema, merge, safe_url
    from tuner.version import __version__

    if args.url == settings.db_url:
        raise UsageError(f"merge reads another database into {safe_url(args.url)}; name a "
                         f"different SOURCE_URL (or --db)")
    ensure_schema(settings.db_url)
    with Store.open(settings.db_url) as store:
        store.check_writable()
        report = merge(store, args.url, user=settings.user, host=socket.gethostname(),
                       tuner_version=__version__)
    print(f"merged {safe_url(args.url)} into {store.safe_url}: {_applied(report)}")
    return 0


def cmd_db_ls(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage import Store, failure_rules

    with Store.open(settings.db_url, readonly=True) as store:
        workloads, platforms = _selection(store, args.workload, args.platform)
        snapshot = store.snapshot(workload_keys=workloads, platform_keys=platforms)
        names = store.workload_names()
        rules = [r for r in failure_rules(store) if platforms is None or r.platform_key in platforms]
        described = {p.key: _platform_label(p) for p in store.platforms()}
    if not snapshot.bests:
        print(f"no best configs in {store.safe_url}"
              f"{' for this selection' if workloads or platforms else ''}; "
              f"run: tuner search MODEL, or: tuner db import FILE", file=sys.stderr)
    else:
        print(_bests_table(snapshot.bests, names, described))
    if rules:
        if snapshot.bests:
            print()
        print(rules_table(rules, described))
    return 0


def _bests_table(bests: "tuple[BestConfig, ...]", names: dict[str, str], described: dict[str, str]) -> str:
    installed = installed_versions()
    table = [("WORKLOAD", "PLATFORM", "GRAPHS", "SPEEDUP", "INTERVAL", "ROUNDS", "BY", "WHEN",
              "TORCH / TRITON", "RUNTIME", "FLAGS")]
    for row in overview(bests, installed):
        b = row.weakest
        name = names.get(row.workload_key, "?") if row.workload_key else "?"
        table.append((f"{name} {row.workload_key[:8]}", described[b.platform_key],
                      str(row.graphs), _speedup_cell(b),
                      f"[{b.ci_low:.3f}, {b.ci_high:.3f}]", str(b.rounds),
                      f"{b.user}@{b.host}", f"{b.created_at:%Y-%m-%d %H:%M}",
                      f"{b.torch_version or '?'} / {b.triton_version or '?'}",
                      " | ".join(row.runtime) or "-", ",".join(row.flags) or "-"))
    return (f"{format_table(table)}\n\nthin: fewer than {THIN_ROUNDS} rounds, or an interval that includes 1.0; "
            f"stale: older torch/triton than installed ({installed[0]} / {installed[1]}); "
            f"SPEEDUP and INTERVAL are the weakest graph's; RUNTIME: the runtime knobs its graphs' verdicts set")


def rules_table(rules: "list[FailureRule]", described: dict[str, str]) -> str:
    """The learned failure rules `tuner db ls` lists: knob values (or pairs) that never compiled
    on a platform, which searches there skip unmeasured."""
    table = [("PLATFORM", "NEVER COMPILED", "COMPILE ERRORS", "SOURCE")]
    for rule in sorted(rules, key=lambda r: (r.platform_key, -r.failures, r.knobs)):
        source = rule.source if not rule.origin else f"{rule.source} ({rule.origin})"
        table.append((described.get(rule.platform_key, rule.platform_key[:12]),
                      " + ".join(f"{k}={v!r}" for k, v in rule.knobs), str(rule.failures), source))
    return f"learned failure rules (searches on that platform skip these):\n{format_table(table)}"


@dataclass(frozen=True)
class OverviewRow:
    """One workload on one platform in `tuner db ls`."""

    workload_key: str
    weakest: "BestConfig"        # the graph with the lowest ci_low: the workload's evidence
    graphs: int
    flags: tuple[str, ...]       # "thin", "stale"
    runtime: tuple[str, ...] = ()   # the distinct runtime knob settings of its graphs, e.g. "allocator=jemalloc"


def overview(bests: "tuple[BestConfig, ...] | list[BestConfig]",
             installed: tuple[str, str]) -> list[OverviewRow]:
    """Best configs grouped by (workload of their search, platform), with flags and the runtime
    knobs their verdicts set (one label per distinct setting, none for a graph without any).

    thin: some graph has fewer than THIN_ROUNDS rounds, or a tuned (not default) config
    whose interval includes 1.0. stale: some graph was measured under older torch or triton
    than `installed`.
    """
    groups: dict[tuple[str, str], list[BestConfig]] = defaultdict(list)
    for best in bests:
        groups[(best.workload_key, best.platform_key)].append(best)
    rows = []
    for (workload_key, _), members in sorted(groups.items()):
        thin = any(b.rounds < THIN_ROUNDS or (not b.is_default and b.ci_low <= 1.0 <= b.ci_high)
                   for b in members)
        stale = any(older(b.torch_version, installed[0]) or older(b.triton_version, installed[1])
                    for b in members)
        flags = tuple(flag for flag, on in (("thin", thin), ("stale", stale)) if on)
        runtime = tuple(sorted({runtime_label(b.runtime) for b in members} - {""}))
        rows.append(OverviewRow(workload_key=workload_key, graphs=len(members), flags=flags, runtime=runtime,
                                weakest=min(members, key=lambda b: (b.ci_low, b.speedup))))
    return rows


def installed_versions() -> tuple[str, str]:
    """This environment's (torch, triton) versions, without importing either ("none" if absent)."""
    from importlib import metadata

    found = []
    for names in (("torch",), ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")):
        version = "none"
        for name in names:
            try:
                version = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
        found.append(version)
    return found[0], found[1]


def older(have: str, installed: str) -> bool:
    """Whether version `have` is older than `installed` (ignoring local labels such as
    `+cpu`); False when either is unknown."""
    if have in ("", "none", "?") or installed in ("", "none"):
        return False
    from packaging.version import InvalidVersion, Version

    try:                            # local labels (+cpu, +cu128) are builds, not versions
        return Version(Version(have).public) < Version(Version(installed).public)
    except InvalidVersion:
        return False


def _selection(store: "Store", workload: str | None,
               platform: str | None) -> tuple[list[str] | None, list[str] | None]:
    """Resolve --workload and --platform (a key, a key prefix, or a workload's model name)."""
    workloads = platforms = None
    if workload:
        names = store.workload_names()
        workloads = [k for k, n in names.items() if k.startswith(workload) or n == workload]
        if not workloads:
            raise UsageError(f"no workload {workload!r} in {store.safe_url}; "
                             f"list them with: tuner db ls")
    if platform:
        platforms = [p.key for p in store.platforms() if p.key.startswith(platform)]
        if not platforms:
            raise UsageError(f"no platform {platform!r} in {store.safe_url}; "
                             f"list them with: tuner db ls")
    return workloads, platforms


def _speedup_cell(best: "BestConfig") -> str:
    """`defaults` for a defaults-won verdict; `eager` and its speedup for an eager one."""
    if best.is_default:
        return "defaults"
    return f"{'eager ' if best.eager else ''}{best.speedup:.3f}x"


def _platform_label(platform) -> str:
    hardware = dict(platform.hardware)
    name = hardware.get("gpu_name") or hardware.get("cpu_model") or platform.device
    return f"{name[:28]} {platform.key[:8]}"


def _applied(report: "ApplyReport") -> str:
    return (f"{_n(report.records, 'record')}: {report.stored} stored as best, "
            f"{report.not_better} kept the stored config (better or current evidence), "
            f"{report.already_present} already present; added {_n(report.platforms_added, 'platform')}, "
            f"{_n(report.workloads_added, 'workload')}"
            + (f"; {_n(report.rules, 'learned failure rule')}, {report.rules_stored} new or stronger here"
               if report.rules else "")
            + (f"; {_n(report.kernels, 'kernel config')}, {report.kernels_stored} new or faster here"
               if report.kernels else ""))


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _basename(path: str) -> str:
    from pathlib import Path

    return Path(path).name
