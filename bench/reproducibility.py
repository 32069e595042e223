"""Reproducibility: tune twice from scratch, then re-measure both winners side by side.

    python bench/reproducibility.py [--model examples/mlp.py] [--trials 12] [--rounds 15]
                                    [--confirm-rounds N] [--executor local|ray] [--seed 0]
                                    [--timeout 3600]

Runs the same search twice (`tuner.search.run_search`, the same options, two fresh SQLite
files), then measures in ONE fresh process, paired, interleaved and shuffled per round
(`tuner.measure.run_confirmation`): eager, the default compile, winner A and winner B (each as
stored: eager, defaults or its knobs). Prints whether the same config won (and both configs),
and for each winner the speedup it claims over the default compile (what its search stored)
against the one re-measured here, each with its interval, and the gap in percent; with the
figure its search saw when the store has it.

Goal (issue 9): the claimed speedup within ±3% of a fresh re-measurement.
Not a test: with the defaults it takes tens of minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from side_by_side import ROOT, Stored, measure, tune

if TYPE_CHECKING:
    from tuner.trial import ConfirmResult

WINNERS = ("winner A", "winner B")


def report(winners: dict[str, Stored], measured_result: ConfirmResult) -> list[str]:
    """The lines that compare each winner's claim with its re-measurement."""
    from tuner.trial import speedup

    base = measured_result.get("default")
    lines = []
    for label, stored in winners.items():
        lines.append(f"  {label}: {stored.describe()}")
        lines.append(f"    claimed     {stored.claimed()}")
        variant = measured_result.get(label)
        sp = speedup(base, variant) if base and base.round_ms and variant and variant.round_ms else None
        if sp is None:
            error = (variant.error or "").strip().splitlines()[:1] if variant else []
            lines.append(f"    re-measured: none ({variant.status.value if variant else 'missing'}"
                         f"{': ' + error[0][:100] if error else ''})")
            continue
        gap = 100 * (stored.best.speedup / sp.median - 1)
        lines.append(f"    re-measured {sp.median:.2f}x [{sp.low:.2f}, {sp.high:.2f}] over {sp.rounds} rounds; "
                     f"claimed - re-measured: {gap:+.1f}% (goal: within 3%)")
    eager = measured_result.get("eager")
    if eager and eager.round_ms and base and base.round_ms:
        sp = speedup(base, eager)
        lines.append(f"  eager over the default compile: {sp.median:.2f}x [{sp.low:.2f}, {sp.high:.2f}]")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "examples" / "mlp.py"))
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds of the re-measurement")
    parser.add_argument("--confirm-rounds", type=int, default=None,
                        help="each search's --rounds: paired rounds of its confirmation and claim run "
                             "(default: tuner search's)")
    parser.add_argument("--executor", default="local", choices=("local", "ray"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for the re-measuring run")
    args = parser.parse_args(argv)
    from tuner.trial import ConfirmRequest, MeasureSpec

    model = Path(args.model).expanduser().resolve()
    start = time.monotonic()
    winners: dict[str, Stored] = {}
    with tempfile.TemporaryDirectory(prefix="tuner-repro-") as tmp:
        for label, db in zip(WINNERS, ("a.db", "b.db")):
            winners[label], seconds = tune(model, trials=args.trials, seed=args.seed,
                                           db_url=f"sqlite:///{Path(tmp) / db}", executor=args.executor,
                                           rounds=args.confirm_rounds)
            print(f"{label}: searched in {seconds:.0f} s: {winners[label].describe()}", flush=True)
    variants = (("eager", None), ("default", ()), *((label, s.params) for label, s in winners.items()))
    request = ConfirmRequest(spec=MeasureSpec(str(model), seed=args.seed, timeout_s=args.timeout),
                             variants=variants, rounds=args.rounds)
    measured = measure(request, ceiling=False, timeout_s=args.timeout)
    a, b = winners.values()
    same = (a.params == b.params)
    print(f"\nreproducibility of {model.name}: two searches of {args.trials} trials (seed {args.seed}, "
          f"executor {args.executor}), re-measured in one fresh process, {args.rounds} rounds, "
          f"{measured.result.threads} threads ({measured.seconds:.0f} s; {time.monotonic() - start:.0f} s in all)")
    print(f"  same config won: {'yes' if same else 'no'}")
    for line in report(winners, measured.result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
