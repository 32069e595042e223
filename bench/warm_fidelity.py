"""The trial's figures with warm trial processes on and off, side by side (issue 34).

    python bench/warm_fidelity.py [--model examples/resnet.py] [--params freezing=true]
                                  [--pairs 6] [--confirmations 5] [--repeat 20] [--rounds 20]
                                  [--timeout 1200]

Two local executors, one with spares forked from a zygote (the default) and one with every
trial process started cold (`--cold-processes`), take turns: per pair, each mode runs the
candidate's trial and a trial of the defaults against themselves (its ratio is this protocol's
noise within one process), the mode that goes first alternating. Then each mode confirms the
default and the candidate `--confirmations` times, each in a fresh process of its own, taking
turns. Prints, per mode, the candidate's trial speedups and confirmed speedups with their
spread (max/min - 1: how far figures of that mode alone, from separate processes, lie apart),
then the gap between the modes' medians beside that noise floor (the larger mode's spread).
The floor is between processes because every figure compared comes from a process of its own;
the defaults' self-ratios (noise within one process, much tighter) are printed beside it.
Goal (issue 34): the modes' median trial speedups, and their median confirmed speedups, differ
by no more than the floor. Five confirmations a mode, because the spread of three understates the
noise (here 0.7% from three, then 2.3% from five, on the same build). Not a test: about 8
minutes on 2 cores. Exit status 1 when a gap exceeds its floor, 2 when a trial or confirmation
failed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from trial_vs_confirmation import candidate_arguments, candidate_spec  # noqa: E402

MODES = ("cold", "warm")


def _trials(executors: dict, spec, params, pairs: int) -> tuple[dict, dict]:
    """Per mode: the candidate's trial speedups and the defaults' self-ratios; None on a failure."""
    from tuner.trial import TrialRequest

    candidate: dict[str, list[float]] = {mode: [] for mode in MODES}
    noise: dict[str, list[float]] = {mode: [] for mode in MODES}
    number = 0
    for pair in range(pairs):
        for mode in (MODES if pair % 2 == 0 else MODES[::-1]):
            for params_, into in ((params, candidate), ((), noise)):
                number += 1
                executors[mode].submit(TrialRequest(spec=spec, params=params_, number=number))
                _, m = executors[mode].next_result()
                if not m.ok or m.speedup is None:
                    print(f"{mode} trial {dict(params_) or 'defaults'}: {m.status.value} {m.error or ''}")
                    return {}, {}
                into[mode].append(m.speedup)
                print(f"  pair {pair} {mode:4} {'candidate' if params_ else 'defaults '} {m.speedup:.3f}x",
                      flush=True)
    return candidate, noise


def _confirmed(executors: dict, spec, params, rounds: int, count: int) -> dict[str, list[float]]:
    """Per mode: the candidate's confirmed speedups over the default (all rounds), `count` each,
    the mode that goes first alternating; {} on a failure."""
    from tuner.trial import ConfirmRequest, ConfirmResult, speedup

    out: dict[str, list[float]] = {mode: [] for mode in MODES}
    for turn in range(count):
        for mode in (MODES if turn % 2 == 0 else MODES[::-1]):
            result = executors[mode].run_confirmation(
                ConfirmRequest(spec=spec, variants=(("default", ()), ("candidate", params)), rounds=rounds))
            sp = speedup(result.get("default"), result.get("candidate")) if isinstance(result, ConfirmResult) else None
            if sp is None:
                print(f"{mode} confirmation has no figure: {result}")
                return {}
            out[mode].append(sp.median)
            print(f"  {mode:4} confirmation {sp.median:.3f}x [{sp.low:.3f}, {sp.high:.3f}]", flush=True)
    return out


def spread(values: list[float]) -> float:
    """How far apart one mode's figures from separate processes lie: max/min - 1."""
    return max(values) / min(values) - 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    candidate_arguments(parser, ROOT / "examples" / "resnet.py")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--confirmations", type=int, default=5, help="per mode")
    args = parser.parse_args(argv)

    from tuner.workers import get_executor

    spec, params = candidate_spec(args)
    executors = {mode: get_executor("local", workers=1, warm=mode == "warm") for mode in MODES}
    try:
        candidate, noise = _trials(executors, spec, params, args.pairs)
        confirmed = _confirmed(executors, spec, params, args.rounds, args.confirmations) if candidate else {}
    finally:
        for executor in executors.values():
            executor.close()
    if not confirmed:
        return 2
    within = max(abs(r - 1.0) for mode in MODES for r in noise[mode])
    print(f"\nmodel {args.model}, candidate {dict(params)}, {args.pairs} pairs, {args.confirmations} confirmations")
    for mode in MODES:
        print(f"{mode}: trial speedups {', '.join(f'{s:.3f}' for s in candidate[mode])} "
              f"(median {statistics.median(candidate[mode]):.3f}x, spread {100 * spread(candidate[mode]):.1f}%); "
              f"confirmed {', '.join(f'{s:.3f}' for s in confirmed[mode])} (median "
              f"{statistics.median(confirmed[mode]):.3f}x, spread {100 * spread(confirmed[mode]):.1f}%); "
              f"defaults self-ratios {', '.join(f'{s:.3f}' for s in noise[mode])}")
    trial_floor = max(spread(candidate[mode]) for mode in MODES)
    confirm_floor = max(spread(confirmed[mode]) for mode in MODES)
    trial_gap = statistics.median(candidate["warm"]) / statistics.median(candidate["cold"]) - 1.0
    confirm_gap = statistics.median(confirmed["warm"]) / statistics.median(confirmed["cold"]) - 1.0
    print(f"warm/cold: trial median {100 * trial_gap:+.1f}% (floor {100 * trial_floor:.1f}%), confirmed median "
          f"{100 * confirm_gap:+.1f}% (floor {100 * confirm_floor:.1f}%); within one process the defaults "
          f"vary {100 * within:.1f}%")
    return 0 if abs(trial_gap) <= trial_floor and abs(confirm_gap) <= confirm_floor else 1


if __name__ == "__main__":
    sys.exit(main())
