"""Reproducibility: tune N times from scratch; how often the stored config differs, and what it costs.

    python bench/reproducibility.py [--model examples/resnet.py ...] [--trials 12] [--repeat 5]
                                    [--rounds 20] [--confirm-rounds N] [--executor local|ray]
                                    [--seed 0] [--timeout 3600]
    python bench/reproducibility.py --replay bench/tables/mlp_cpu.json [--repeat 100] [--trials 48]
                                    [--confirm-rounds 20] [--seed 0] [--each]

Real searches (`--model`, repeatable or a comma list): per model, `--repeat` searches from scratch
(`tuner.search.run_search`, seeds `--seed`.., each into a fresh SQLite file, the local executor by
default). Prints each search's stored verdict (compile knobs, runtime knobs, claim, stability); how
many distinct configs were stored, the most common and its count; then every distinct stored compile
config re-measured side by side in ONE fresh process, paired, interleaved and shuffled per round
(`side_by_side.measure`: eager, the default compile and each config), with each one's speedup over
the default and its interval, and the regret: how much faster the best re-measured variant is than
each stored config (%), whether that is within 3% and whether it is within the re-measurement's
interval (the best's paired interval over the config reaches 1). Runtime knobs cannot be paired in
one process: the re-measurement compares compile configs, and prints the stored runtime knobs beside.

Recorded spaces (`--replay TABLE`): `--repeat` re-tunes of the product's search and verdict through
a replay executor, with noise synthesized from the table (bench/reproducibility_replay.py says how).
Prints the flip rate (the share of re-tunes whose stored config is not the most common one), the
share of pairs of re-tunes that disagree, each distinct config with its count, and, the table
knowing each config's speedup, the regret of each against the table's best. Minutes for 100.

Each search's claim is printed beside its config's re-measured figure (claimed - re-measured, in %;
issue 9's goal: within 3%), though a claim taken with runtime knobs is not the same measurement.
`--replay` ignores --model, --rounds, --executor and --timeout; `--each` prints every re-tune's
finalists, choice and elimination steps on stderr.

Goal (issue 42): the same search twice stores the same config or one as fast; over 100 re-tunes the
flip rate is at most 10%. Not a test: real mode takes minutes to tens of minutes per search on 2 cores.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from reproducibility_replay import flips, regret, retunes

ROOT = Path(__file__).resolve().parent.parent
GOAL_FLIPS, CLOSE = 0.10, 3.0      # issue 42's flip rate; "as fast": within 3% of the best


def stored_runtime(stored: Any) -> str:
    """The runtime knobs stored with a search's verdict ("none" also for a tuner that stores none)."""
    return ", ".join(f"{k}={v}" for k, v in sorted((getattr(stored.best, "runtime", None) or {}).items())) or "none"


def stored_line(stored: Any) -> str:
    """One search's stored verdict: compile knobs, runtime knobs, claim and stability."""
    stability = getattr(stored.best, "stability", None)
    return (f"{stored.describe()}; runtime knobs: {stored_runtime(stored)}; claim {stored.claimed()}; "
            f"stability {'-' if stability is None else f'{stability:.0%}'}")


def real(model: Path, args: argparse.Namespace) -> None:
    """`args.repeat` searches of `model` from scratch, then their distinct stored configs re-measured."""
    from side_by_side import tune

    started = time.monotonic()
    searches = []
    with tempfile.TemporaryDirectory(prefix="tuner-repro-") as tmp:
        for seed in range(args.seed, args.seed + args.repeat):
            stored, seconds = tune(model, trials=args.trials, seed=seed, db_url=f"sqlite:///{Path(tmp) / f'{seed}.db'}",
                                   executor=args.executor, rounds=args.confirm_rounds)
            searches.append(stored)
            print(f"  search {len(searches)} (seed {seed}, {seconds:.0f} s): {stored_line(stored)}", flush=True)
    counts = flips([s.describe() for s in searches])
    print(f"\n{model.name}: {args.repeat} searches of {args.trials} trials, executor {args.executor}")
    print(f"  stored: the same minimal config in {counts.counts[0][1]} of {args.repeat} ({counts.modal}); "
          f"{len(counts.counts)} distinct; flip rate {counts.flip_rate:.0%}, pairs that disagree "
          f"{counts.pair_rate:.0%}")
    remeasure(model, searches, args)
    print(f"  ({time.monotonic() - started:.0f} s in all)")


def remeasure(model: Path, searches: list[Any], args: argparse.Namespace) -> None:
    """Eager, the default compile and every distinct stored compile config in ONE fresh process, paired;
    each one's speedup over the default and its regret against the fastest of them."""
    from side_by_side import measure
    from tuner.trial import ConfirmRequest, MeasureSpec, speedup

    first: dict[str, Any] = {}                   # description -> the first search that stored it
    for s in searches:
        first.setdefault(s.describe(), s)
    labels = {d: "eager" if s.params is None else "default" if s.params == () else "" for d, s in first.items()}
    for n, d in enumerate((d for d, label in labels.items() if not label), start=1):
        labels[d] = f"config {n}"
    variants = (("eager", None), ("default", ()), *((labels[d], s.params) for d, s in first.items() if s.params))
    request = ConfirmRequest(spec=MeasureSpec(str(model), seed=args.seed, timeout_s=args.timeout),
                             variants=variants, rounds=args.rounds)
    measured = measure(request, ceiling=False, timeout_s=args.timeout).result
    base = measured.get("default")
    figures = {v.label: speedup(base, v) for v in measured.variants if base and base.round_ms and v.round_ms}
    best = max(figures, key=lambda label: figures[label].median) if figures else None
    print(f"  re-measured in one fresh process, {args.rounds} rounds, {measured.threads} threads: compile configs "
          f"only (runtime knobs cannot be paired in one process; the ones stored are shown beside); fastest: {best}")
    close = within = 0
    for description, stored in first.items():
        label, same = labels[description], [s for s in searches if s.describe() == description]
        runtimes = Counter(stored_runtime(s) for s in same)
        print(f"  {label} ({len(same)} of {len(searches)}): {description}; stored runtime knobs: "
              + "; ".join(f"{r} ({k})" for r, k in runtimes.most_common()))
        line, near, tied = remeasured_line(label, figures, best, measured)
        print("    " + line)
        if figures.get(label) is not None:
            gaps = ", ".join(f"{s.best.speedup:.2f}x ({100 * (s.best.speedup / figures[label].median - 1):+.1f}%)"
                             for s in same)
            print(f"    claimed by its searches (claimed - re-measured; a claim includes its runtime knobs): {gaps}")
        close, within = close + len(same) * near, within + len(same) * tied
    print(f"  searches whose stored compile config is within {CLOSE:.0f}% of the fastest re-measured: {close} of "
          f"{len(searches)}; within the re-measurement's interval: {within} of {len(searches)}")


def remeasured_line(label: str, figures: dict[str, Any], best: str | None, measured: Any) -> tuple[str, bool, bool]:
    """A config's re-measured speedup over the default and its regret against the fastest variant `best`;
    whether it is within CLOSE of it, and within the re-measurement's interval (the paired interval of
    `best` over it reaches 1)."""
    from tuner.trial import speedup

    sp = figures.get(label)
    if sp is None:
        variant = measured.get(label)
        error = (variant.error or "").strip().splitlines()[:1] if variant else []
        why = f"{variant.status.value if variant else 'missing'}{': ' + error[0][:100] if error else ''}"
        return f"re-measured: none ({why})", False, False
    head = f"re-measured {sp.median:.2f}x [{sp.low:.2f}, {sp.high:.2f}] over the default"
    if label == best:
        return f"{head}: the fastest re-measured", True, True
    loss = regret(figures[best].median, sp.median)
    paired = speedup(measured.get(label), measured.get(best))     # the best over this config, paired
    within = not paired.clears_noise
    return (f"{head}; regret {loss:.1f}% against {best} ({best} over it, paired: {paired.median:.3f}x "
            f"[{paired.low:.3f}, {paired.high:.3f}]): within {CLOSE:.0f}% {'yes' if loss <= CLOSE else 'no'}, "
            f"within the re-measurement's interval {'yes' if within else 'no'}"), loss <= CLOSE, within


def replay(args: argparse.Namespace) -> None:
    """`args.repeat` re-tunes of the recorded table `args.replay`, then the flip rate and regrets."""
    import tuner
    from reproducibility_replay import configs
    from tuner.search.recording import read_table

    table = read_table(args.replay)
    truth = configs(table)
    best = max(truth.values(), key=lambda c: c.truth)
    trials = args.trials or len(table.rows)
    rounds = args.confirm_rounds or 20
    started = time.monotonic()

    def progress(r: Any) -> None:
        if args.each:
            print(f"  seed {r.seed}: {r.config} (claim {r.claim[0]:.3f}x, stability "
                  f"{'-' if r.stability is None else f'{r.stability:.0%}'}); finalists: {' | '.join(r.finalists)}; "
                  f"{'; '.join(r.path)}", file=sys.stderr, flush=True)
        elif (r.seed - args.seed + 1) % 10 == 0:
            print(f"  {r.seed - args.seed + 1} of {args.repeat} re-tunes", file=sys.stderr, flush=True)

    done = retunes(table, repeat=args.repeat, seed=args.seed, trials=trials, rounds=rounds, progress=progress)
    counts = flips([r.config for r in done])
    print(f"{table.model} replayed from {args.replay} ({len(table.rows)} configs, {len(table.rows) - len(truth)} "
          f"failing; the best: {best.truth:.3f}x): {args.repeat} re-tunes of {trials} trials, --rounds {rounds}, "
          f"seeds {args.seed}..{args.seed + args.repeat - 1}, runtime knobs off; tuner from "
          f"{Path(tuner.__file__).parent} ({time.monotonic() - started:.0f} s)")
    modal = next(r.truth for r in done if r.config == counts.modal)
    apart = [r for r in done if r.truth is None or modal is None or abs(regret(max(modal, r.truth),
                                                                               min(modal, r.truth))) > CLOSE]
    after = len(apart) / len(done)
    print(f"  flip rate {counts.flip_rate:.0%} (re-tunes whose stored config is not the most common); pairs of "
          f"re-tunes that disagree: {counts.pair_rate:.0%}")
    print(f"  after equivalence (a stored config whose true speedup is within {CLOSE:.0f}% of the most common one's "
          f"counts as the same answer): flip rate {after:.0%}; goal (issue 42): at most {GOAL_FLIPS:.0%}, "
          f"{'met' if after <= GOAL_FLIPS else 'not met'}")
    by_config = {c: [r for r in done if r.config == c] for c, _ in counts.counts}
    print(f"  {len(counts.counts)} distinct stored configs; true speedup and regret from the table, against its best:")
    for config, n in counts.counts:
        runs = by_config[config]
        value = runs[0].truth
        stab = [r.stability for r in runs if r.stability is not None]
        loss = "?" if value is None else f"{regret(best.truth, value):.1f}%"
        print(f"    {n:3d}x {config}: true {'?' if value is None else f'{value:.3f}x'}, regret {loss}, claimed "
              f"{statistics.median(r.claim[0] for r in runs):.3f}x (median)"
              + (f", stability {statistics.median(stab):.0%} (median)" if stab else ""))
    losses = [regret(best.truth, r.truth) for r in done if r.truth is not None]
    if losses:
        print(f"  regret over the re-tunes: median {statistics.median(losses):.1f}%, mean "
              f"{statistics.fmean(losses):.1f}%, max {max(losses):.1f}%; within {CLOSE:.0f}% of the table's best: "
              f"{sum(x <= CLOSE for x in losses)} of {len(losses)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="a model file (repeatable, or a comma list; "
                        "default examples/resnet.py)")
    parser.add_argument("--replay", help="a recorded table (tuner record-space): re-tune it instead of searching")
    parser.add_argument("--repeat", type=int, default=None, help="searches per model (default 5; --replay: 100)")
    parser.add_argument("--trials", type=int, default=None, help="trials per search (default 12; --replay: the "
                        "table's size)")
    parser.add_argument("--rounds", type=int, default=20, help="paired rounds of the re-measurement")
    parser.add_argument("--confirm-rounds", type=int, default=None,
                        help="each search's --rounds: the first look of its confirmation runs (default: 20)")
    parser.add_argument("--executor", default="local", choices=("local", "ray"))
    parser.add_argument("--seed", type=int, default=0, help="the first search's seed; search i has seed + i")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for the re-measuring run")
    parser.add_argument("--each", action="store_true", help="--replay: one line per re-tune on stderr "
                        "(finalists, choice, elimination steps)")
    args = parser.parse_args(argv)
    if args.replay and args.model:
        parser.error("--replay re-tunes a recorded table, --model searches a model: give one of them")
    if args.repeat is not None and args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.replay:
        from tuner.errors import TunerError

        args.repeat = args.repeat or 100
        try:
            replay(args)
        except TunerError as exc:           # a missing or malformed table: its one line names the fix
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    args.repeat, args.trials = args.repeat or 5, args.trials or 12
    models = [m for given in (args.model or [str(ROOT / "examples" / "resnet.py")]) for m in given.split(",") if m]
    for model in models:
        print(f"{model}:", flush=True)
        real(Path(model).expanduser().resolve(), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
