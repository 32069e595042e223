"""`tuner best MODEL` and `tuner trials MODEL`: what the database holds for a model file here.

Both capture the model file's workload as `tuner search` does (Dynamo's warnings hidden unless
--debug: they are about the model, not the stored results) and read the store only.
A model with nothing stored is not an error of the database: it prints what to run, exit 1.
`best_text` and `trials_table` are what they print.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tuner.cli.common import (add_command, add_db_option, add_shapes_option, bucket_sizes, dynamo_warnings_hidden,
                              format_table, runtime_label)
from tuner.settings import Settings
from tuner.text import key_values

if TYPE_CHECKING:
    from tuner.storage import BestConfig, StudyInfo, TrialRecord
    from tuner.trial import Measurement


def add_results_parsers(subparsers: Any) -> None:
    b = add_command(subparsers, "best", cmd_best, help="print the stored best config of a model file")
    b.add_argument("model")
    b.add_argument("--emit", choices=("python", "json"), default=None,
                   help="print the verdict as code that applies it with torch alone (python), or as data (json)")
    add_db_option(b)
    t = add_command(subparsers, "trials", cmd_trials, help="list every stored trial of a model file")
    t.add_argument("model")
    add_db_option(t)
    for p in (b, t):    # a training step is another workload than the forward pass
        p.add_argument("--mode", default="inference", choices=("inference", "train"),
                       help="the search's --mode (default inference)")
        add_shapes_option(p)


def cmd_best(args: argparse.Namespace, settings: Settings) -> int:
    """One verdict, or with --shapes one block per bucket (exit 1 when no bucket has one). With
    --emit, the verdicts as torch code or JSON (`tuner.report.portable`), nothing else on stdout."""
    if args.emit:
        return _emit(args, settings)
    sizes = bucket_sizes(args.shapes)
    found = 0
    for shape in sizes:
        if len(sizes) > 1 or shape:
            from tuner.workload import shape_label

            print(f"{shape_label(shape)}:")
        found += _best(args, settings, shape) == 0
    return 0 if found else 1


def _emit(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.inductor import triton_choices
    from tuner.report import portable_verdict, render_portable
    from tuner.search import prepare_target
    from tuner.storage import Store, kernel_configs
    from tuner.workload import shape_label

    portables = []
    for shape in bucket_sizes(args.shapes):
        with dynamo_warnings_hidden(args, settings):
            target = prepare_target(args.model, mode=args.mode, shape=shape)
        workload, platform = target.workload, target.platform
        with Store.open(settings.db_url, readonly=True) as store:
            bests = store.workload_best(workload.key, platform.key)
            kernels = sum(len(kernel_configs(store, platform_key=platform.key, kernel_name=triton_choices.KERNEL_PREFIX + g.key))
                          for g in workload.graphs)
        if not bests:
            print(f"no stored config for {args.model}{f' ({shape_label(shape)})' if shape else ''} on "
                  f"{platform.describe()}; run: tuner search {args.model}", file=sys.stderr)
            return 1
        keywords = ", ".join(f"{k}={v}" for k, v in shape)
        portables.append(portable_verdict(bests, model=args.model, workload=workload, platform=platform,
                                          train=args.mode == "train", shape=keywords, kernels=kernels))
    print(render_portable(portables, args.emit), end="" if args.emit == "python" else "\n")
    return 0


def _best(args: argparse.Namespace, settings: Settings, shape: tuple[tuple[str, int], ...]) -> int:
    from tuner.search import prepare_target
    from tuner.storage import Store

    with dynamo_warnings_hidden(args, settings):
        target = prepare_target(args.model, mode=args.mode, shape=shape)
    with Store.open(settings.db_url, readonly=True) as store:
        bests = store.workload_best(target.workload.key, target.platform.key)
        study = store.last_study(target.workload.key, target.platform.key)
        # a study of several objectives: its Pareto front is shown below the verdict
        trials = store.trials(study.id) if study is not None and study.objectives != ("latency",) else []
    if not bests:
        print(f"no stored config for {args.model} on {target.platform.describe()}; "
              f"run: tuner search {args.model}", file=sys.stderr)
        return 1
    print(workload_best_text(bests))
    if trials:
        print(front_text(study, trials))
    return 0


def front_text(study: "StudyInfo", records: "list[TrialRecord]") -> str:
    """The Pareto front of a study's ok trials on its objectives, best on its preference first:
    trial number, latency ratio to the defaults, peak MB, compile s and knobs (`tuner.search.objectives`)."""
    from tuner.search import front, preferred_order

    points = preferred_order(front(records, study.objectives), study.objectives, study.prefer)
    ok = sum(1 for r in records if r.measurement.ok)
    head = (f"Pareto front of study {study.id} (objectives {', '.join(study.objectives)}; prefer {study.prefer}): "
            f"{len(points)} of {ok} ok trials, best on {study.prefer} first")
    rows = [("#", "latency ratio", "peak MB", "compile s", "knobs")]
    rows += [(str(r.number), _fmt(r.measurement.objective), _fmt(r.measurement.peak_mem_mb, ".0f"),
              _fmt(r.measurement.compile_s, ".1f"), key_values(sorted(r.params.items())) or "defaults")
             for r in points]
    return head + "\n" + format_table(rows)


def workload_best_text(bests: "list[BestConfig]") -> str:
    """`best_text` once when every graph of the workload holds the same verdict (one search
    stores one verdict for all its graphs); else one block per graph, headed by its key, since
    a graph shared with another model may hold that model's verdict."""
    same = all(replace(b, graph_key="") == replace(bests[0], graph_key="") for b in bests)
    if same:
        extra = [f"applies to all {len(bests)} graphs of this model"] if len(bests) > 1 else []
        return "\n".join([best_text(bests[0]), *extra])
    blocks = [f"graph {i} of {len(bests)} ({b.graph_key[:12]}):\n" + _indent(best_text(b))
              for i, b in enumerate(bests, start=1)]
    return "\n".join(blocks)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def cmd_trials(args: argparse.Namespace, settings: Settings) -> int:
    """Every stored trial, or with --shapes those of each bucket (exit 1 when no bucket has any)."""
    from tuner.search import prepare_target
    from tuner.storage import Store
    from tuner.workload import shape_label

    found = 0
    for shape in bucket_sizes(args.shapes):
        with dynamo_warnings_hidden(args, settings):
            target = prepare_target(args.model, mode=args.mode, shape=shape)
        with Store.open(settings.db_url, readonly=True) as store:
            rows = store.trials_for_workload(target.workload.key, target.platform.key)
        if shape:
            print(f"{shape_label(shape)}:")
        found += _print_trials(args, rows) == 0
    return 0 if found else 1


def _print_trials(args: argparse.Namespace, rows: list) -> int:
    if not rows:
        print(f"no stored trials for {args.model} on this platform; run: tuner search {args.model}", file=sys.stderr)
        return 1
    for study_id in sorted({study.id for study, _ in rows}):
        study = next(s for s, _ in rows if s.id == study_id)
        print(f"study {study.id} ({study.created_at:%Y-%m-%d %H:%M}, sampler {study.sampler}, seed {study.seed})")
        print(trials_table([r for s, r in rows if s.id == study_id]))
    return 0


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _config(params: dict[str, Any]) -> str:
    return key_values(sorted(params.items())) or "Inductor's defaults"


def best_text(best: "BestConfig") -> str:
    """What `tuner best` prints for one graph's stored verdict: the config (or eager), its runtime
    knobs when it sets any, the config without freezing that `backend="tuner"` applies when the
    config freezes, the confirmed evidence, its stability and the search-time figure when stored,
    latencies and provenance."""
    config = "eager (run uncompiled)" if best.eager else _config(best.params)
    lines = [f"config: {config}"]
    runtime = runtime_label(best.runtime)
    if runtime:
        lines.append(f"runtime: {runtime}")
    if best.params.get("freezing") is True:
        lines.append(f'with grad enabled backend="tuner" cannot freeze; it applies: {_unfrozen(best)}')
    lines.append(f"confirmed speedup over default compile: {best.speedup:.2f}x "
                 f"[{best.ci_low:.2f}, {best.ci_high:.2f}] over {best.rounds} paired rounds")
    if best.stability is not None:
        lines.append(f"stability: fastest or tied in {best.stability:.0%} of resamples of its held-out rounds")
    if best.search_speedup is not None:
        lines.append(f"speedup seen in its search trial: {best.search_speedup:.2f}x (unconfirmed)")
    when = best.created_at.strftime("%Y-%m-%d %H:%M UTC") if best.created_at else "?"
    lines += [f"latency: {_fmt(best.latency_ms)} ms {'uncompiled' if best.eager else 'tuned'}, "
              f"{_fmt(best.baseline_ms)} ms default",
              f"provenance: {best.user}@{best.host}, {when}, tuner {best.tuner_version}, "
              f"torch {best.torch_version}"]
    return "\n".join(lines)


def _unfrozen(best: "BestConfig") -> str:
    if best.unfrozen_params is None:
        return ("Inductor's defaults (no config without freezing was measured for this graph; "
                "search again to measure one)")
    figure = "" if best.unfrozen_speedup is None else f", confirmed {best.unfrozen_speedup:.2f}x"
    if best.unfrozen_eager:
        return f"eager (run uncompiled: it beat every config without freezing){figure}"
    return f"{_config(best.unfrozen_params)}{figure}"


def compile_text(m: "Measurement") -> str:
    """A trial's compile seconds, with "(hit)" or "(miss)" where it knows whether Inductor's FX graph
    cache served the compile."""
    cached = "" if m.compile_cached is None or m.compile_s is None else " (hit)" if m.compile_cached else " (miss)"
    return _fmt(m.compile_s, ".1f") + cached


def trials_table(records: "list[TrialRecord]") -> str:
    """One row per trial. A "vs default" column (the trial's speedup over Inductor's defaults,
    timed in the same process, with its interval) appears when some trial has one. "compile s"
    says "(hit)" when Inductor's FX graph cache served the compile, "(miss)" when it compiled; a
    "start/load/measure s" column (process start and imports, model loads and references, the
    timed section) appears when some trial recorded them."""
    from tuner.cli.summary import speedup_text      # loads the storage layer: not at `tuner --help`
    paired = any(r.measurement.speedup is not None for r in records)
    phased = any(r.measurement.start_s is not None or r.measurement.load_s is not None for r in records)
    rows = [("#", "status", "latency ms", *(("vs default",) if paired else ()), "spread ms",
             "compile s", *(("start/load/measure s",) if phased else ()), "peak MB", "params / error")]
    for r in records:
        m = r.measurement
        label = key_values(sorted(r.params.items())) or "defaults"
        headline = (m.error or "").partition("\n")[0][:100]
        detail = label if m.ok and not headline else f"{label} | {headline}"   # ok: a precision's error
        versus = (speedup_text(m),) if paired else ()
        phases = ("/".join(_fmt(v, ".1f") for v in (m.start_s, m.load_s, m.measure_s)),) if phased else ()
        rows.append((str(r.number), m.status.value, _fmt(m.latency_ms), *versus, _fmt(m.spread_ms),
                     compile_text(m), *phases, _fmt(m.peak_mem_mb, ".0f"), detail))
    return format_table(rows)
