"""Tuned against built-in: eager, the default compile, each built-in mode and the tuned config, side by side.

    python bench/tuned_vs_builtin.py [--trials 8] [--models mlp,gpt2,...] [--rounds 15] [--db URL]
                                     [--confirm-rounds N] [--executor local|ray] [--seed 0]
                                     [--timeout 3600]

For each model it tunes (`tuner.search.run_search`, into a fresh SQLite file in a temporary
folder unless --db), reads the stored verdict, then measures in ONE fresh process, paired,
interleaved and shuffled per round (`tuner.measure.run_confirmation`): eager, the default
compile, each built-in mode (`max-autotune-no-cudagraphs`, `max-autotune`, `reduce-overhead`;
on CPU the last two run, cudagraphs simply do not apply) and "tuned", the stored verdict
(eager, defaults or its knobs; beside a freezing winner also what `backend="tuner"` applies to a
graph traced with grad enabled, where it cannot freeze).
Per variant it prints the median latency with its interval, the paired speedup over the default
compile with its interval, and the share of the machine's GEMM ceiling it reaches (the model's
FLOPs per call, counted on eager, over the ceiling measured in the same process). Then, per
model, whether tuned is at least as fast as the best built-in (chosen on half the rounds,
compared on the other half), and the geomean of tuned over the default compile.

Then, in another fresh process, the stored config applied as a user applies it (`tuner compare`'s
`compare_applied`): the default compile, `torch.compile(backend="tuner")` and `tuner.compile`,
each checked against eager and timed paired and interleaved. It prints both tuned rows with
their speedup over the default compile, the ratio of the two, and each against the stored
claim: "within 5%" when the ratio lies in [0.95, 1.05].

Models: the examples, and a suite built from configs with random weights (bench/models/): a
GPT-2-style and a BERT-style model (transformers), ResNet-18 and MobileNetV3-Small
(torchvision), a small ViT (timm). `pip install -e '.[bench]'` installs those packages; a
model whose package is missing is skipped with a note. Not a test: with the default budget it
takes about an hour on 2 cores.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from side_by_side import CEILING_SIZE, ROOT, Applied, Measured, Stored, geomean, interval, measure, measure_applied, tune

if TYPE_CHECKING:
    from tuner.trial import VariantResult

# name -> (model file, the package it needs)
MODELS: dict[str, tuple[str, str | None]] = {
    "mlp": ("examples/mlp.py", None),
    "convnet": ("examples/convnet.py", None),
    "transformer": ("examples/transformer.py", None),
    "gpt2": ("bench/models/gpt2.py", "transformers"),
    "bert": ("bench/models/bert.py", "transformers"),
    "resnet18": ("bench/models/resnet18.py", "torchvision"),
    "mobilenet": ("bench/models/mobilenet.py", "torchvision"),
    "vit": ("bench/models/vit.py", "timm"),
}
BUILTIN_MODES = ("max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead")
# PLAIN: what backend="tuner" applies to a graph traced with grad enabled, where it cannot freeze.
EAGER, DEFAULT, TUNED, PLAIN = "eager", "default", "tuned", "tuned, grad on (no freezing)"


def variants(stored: Stored) -> tuple[tuple[str, tuple | None], ...]:
    """What to measure side by side: eager, the default compile, each mode, the verdict."""
    found = [(EAGER, None), (DEFAULT, ()), *((f"mode {m}", (("mode", m),)) for m in BUILTIN_MODES),
             (TUNED, stored.params)]
    if stored.best.unfrozen_eager:
        found.append((PLAIN, None))                  # with grad on, the backend runs this graph uncompiled
    elif stored.plain_params is not None:
        found.append((PLAIN, stored.plain_params))
    return tuple(found)


def rows(measured: Measured) -> list[tuple[str, str]]:
    """One printed row per variant (label, text), in the request's order."""
    from tuner.trial import speedup

    result = measured.result
    base = result.get(DEFAULT)
    out = []
    for v in result.variants:
        if not v.round_ms:
            headline = (v.error or "").strip().splitlines()[:1]
            out.append((v.label, f"{v.status.value}: {headline[0][:100] if headline else 'no rounds'}"))
            continue
        ms, lo, hi = interval(v.round_ms)
        sp = speedup(base, v) if base is not None and base.round_ms else None
        sp_text = f"{sp.median:5.2f}x [{sp.low:.2f}, {sp.high:.2f}]" if sp else "-"
        share = measured.share(v.latency_ms)
        share_text = f"{share:6.1%}" if share is not None else "     -"
        out.append((v.label, f"{ms:9.3f} [{lo:.3f}, {hi:.3f}]".ljust(30) + f"{sp_text:<22}{share_text}"))
    return out


@dataclass(frozen=True)
class Comparison:
    """Tuned against the best built-in of one model: `verdict` "yes", "no", "no (within noise)"
    or "n/a" (not measured), tuned's speedup over the default compile, and the evidence."""

    verdict: str
    tuned_speedup: float | None = None
    evidence: str = ""
    tuned: str = ""                 # what the stored verdict is (a config, defaults or eager)


def _every_other(variant: VariantResult, first: int) -> VariantResult:
    return replace(variant, round_ms=variant.round_ms[first::2])


def against_builtin(measured: Measured) -> Comparison:
    """Tuned paired against the best built-in, the default compile or a mode: "yes" when the
    median of tuned/best is at least 1. The best is chosen on the even rounds and compared on
    the odd ones, so that picking the luckiest of four built-ins does not bias the answer."""
    from tuner.trial import speedup

    result = measured.result
    base, tuned = result.get(DEFAULT), result.get(TUNED)
    if base is None or len(base.round_ms) < 2 or tuned is None or len(tuned.round_ms) < 2:
        return Comparison("n/a", evidence="tuned or the default compile was not measured")
    builtins = [v for v in result.variants if (v.label == DEFAULT or v.label.startswith("mode ")) and v.round_ms]
    best = max(builtins, key=lambda v: speedup(_every_other(base, 0), _every_other(v, 0)).median)
    paired = speedup(_every_other(best, 1), _every_other(tuned, 1))
    verdict = "yes" if paired.median >= 1.0 else ("no (within noise)" if paired.high >= 1.0 else "no")
    evidence = (f"tuned/{best.label} {paired.median:.2f}x [{paired.low:.2f}, {paired.high:.2f}] "
                f"over {paired.rounds} held-out rounds")
    return Comparison(verdict, speedup(base, tuned).median, evidence)


def run_model(name: str, path: Path, args: argparse.Namespace, folder: Path) -> Comparison:
    """Tune and measure one model, print its table, and compare tuned with the best built-in."""
    from tuner.trial import ConfirmRequest, MeasureSpec

    db_url = args.db or f"sqlite:///{folder / (name + '.db')}"
    stored, tune_s = tune(path, trials=args.trials, seed=args.seed, db_url=db_url, executor=args.executor,
                          rounds=args.confirm_rounds)
    request = ConfirmRequest(spec=MeasureSpec(str(path), seed=args.seed, timeout_s=args.timeout),
                             variants=variants(stored), rounds=args.rounds)
    measured = measure(request, ceiling=True, timeout_s=args.timeout)
    result = measured.result
    flops = f"{measured.flops / 1e9:.3f} GFLOP per call" if measured.flops else "FLOPs unknown"
    ceiling = f"{measured.ceiling_gflops:.1f} GFLOP/s" if measured.ceiling_gflops else "unknown"
    print(f"\n== {name} ({path.relative_to(ROOT)}): {flops}; GEMM ceiling {ceiling} "
          f"({measured.dtype}, {CEILING_SIZE}^3 matmul, {result.threads} threads)")
    print(f"   tuned in {tune_s:.0f} s ({args.trials} trials): {stored.describe()}; claimed {stored.claimed()}"
          + (f"; {stored.differing} of {stored.graphs} graphs hold another config" if stored.differing else ""))
    print(f"   measured in {measured.seconds:.0f} s, {args.rounds} rounds" + (f"; error: {result.error}" if result.error else ""))
    print(f"   {'variant':<34}" + f"{'median ms':>9} [interval]".ljust(30) + f"{'vs default':<22}of ceiling")
    for label, text in rows(measured):
        print(f"   {label:<34}{text}")
    comparison = replace(against_builtin(measured), tuned=stored.describe())
    print(f"   tuned >= best built-in: {comparison.verdict}: {comparison.evidence}")
    print_applied(measure_applied(path, db_url=db_url, rounds=args.rounds, seed=args.seed, timeout_s=args.timeout),
                  claim=stored.best.speedup, rounds=args.rounds)
    return comparison


def print_applied(applied: Applied, *, claim: float, rounds: int) -> None:
    """The applied run's rows, then backend="tuner" against tuner.compile and each against the claim."""
    from tuner.report.applied import BACKEND, DEFAULT, TUNER_COMPILE

    print(f"   applied as a user applies it, one fresh process, {rounds} rounds, {applied.seconds:.0f} s:")
    for label, row in applied.rows.items():
        if row["problem"]:
            print(f"   {label:<38}not timed: {row['problem'][:100]}")
            continue
        sp = row["speedup"]
        versus = "1.00x (baseline)" if label == DEFAULT else (f"{sp[0]:5.2f}x [{sp[1]:.2f}, {sp[2]:.2f}]" if sp else "-")
        print(f"   {label:<38}{row['ms']:9.3f} ms   {versus}")
    backend, compiled = applied.speedup(BACKEND), applied.speedup(TUNER_COMPILE)
    checks = [("backend=tuner / tuner.compile", backend, compiled), ("backend=tuner / stored claim", backend, claim),
              ("tuner.compile / stored claim", compiled, claim)]
    for what, a, b in checks:
        if a and b:
            ratio = a / b
            print(f"   {what:<38}{ratio:.3f} ({'within 5%' if 0.95 <= ratio <= 1.05 else 'NOT within 5%'})")


def pick(models: str | None) -> list[tuple[str, Path]]:
    """The models asked for, in MODELS' order; those whose package is missing are skipped with a note."""
    names = list(MODELS) if not models else [m.strip() for m in models.split(",") if m.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from: {', '.join(MODELS)}")
    chosen = []
    for name in names:
        file, package = MODELS[name]
        if package and importlib.util.find_spec(package) is None:
            print(f"skipped {name}: {package} is not installed (pip install -e '.[bench]')")
            continue
        chosen.append((name, ROOT / file))
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--models", help=f"comma-separated, from: {', '.join(MODELS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds of the side-by-side run")
    parser.add_argument("--confirm-rounds", type=int, default=None,
                        help="each search's --rounds: paired rounds of its confirmation and claim run "
                             "(default: tuner search's)")
    parser.add_argument("--db", help="database URL to tune into (default: a fresh SQLite file per model)")
    parser.add_argument("--executor", default="local", choices=("local", "ray"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for one model's side-by-side run")
    args = parser.parse_args(argv)
    start = time.monotonic()
    outcomes: dict[str, Comparison] = {}
    with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        for name, path in pick(args.models):
            try:
                outcomes[name] = run_model(name, path, args, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - one model's failure is reported, the others still run
                print(f"\n== {name}: failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}")
                outcomes[name] = Comparison("n/a", evidence="failed")
    print(f"\nsummary ({args.trials} trials per model, {time.monotonic() - start:.0f} s in all)")
    for name, c in outcomes.items():
        tuned = f"tuned/default {c.tuned_speedup:.2f}x; " if c.tuned_speedup else ""
        print(f"  {name:<12} tuned >= best built-in: {c.verdict} ({tuned}{c.evidence}); tuned is {c.tuned or '?'}")
    speedups = [c.tuned_speedup for c in outcomes.values() if c.tuned_speedup]
    print(f"  geomean tuned/default over {len(speedups)} models: {geomean(speedups):.3f}x")
    return 0 if outcomes and all(c.verdict != "n/a" for c in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
