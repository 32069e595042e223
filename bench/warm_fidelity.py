"""The trial's figures with warm trial processes on and off, side by side (issue 34).

    python bench/warm_fidelity.py [--model examples/resnet.py] [--params freezing=true]
                                  [--pairs 3] [--repeat 20] [--rounds 20] [--timeout 1200]

Two local executors, one with spares forked from a zygote (the default) and one with every trial process started
cold (`--cold-processes`), take turns: per pair, each mode runs the candidate's trial and a
trial of the defaults against themselves (its ratio is this protocol's noise on this machine),
the mode that goes first alternating. Then each mode confirms the default and the candidate in
a fresh process of its own. Prints, per mode, the candidate's trial speedups, the defaults'
self-ratios and the confirmed speedup, and then the gap between the modes beside the noise floor
(the larger of the two modes' widest self-ratio distance from 1). Goal: the modes' median trial
speedups and their confirmed speedups differ by no more than the noise floor.
Not a test: a resnet run takes about 15 minutes on 2 shared cores. Exit status 1 when a gap
exceeds the floor, 2 when a trial or confirmation failed.
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


def _confirmed(executors: dict, spec, params, rounds: int) -> dict[str, float]:
    """Per mode: the candidate's confirmed speedup over the default (all rounds)."""
    from tuner.trial import ConfirmRequest, ConfirmResult, speedup

    out = {}
    for mode in MODES:
        result = executors[mode].run_confirmation(
            ConfirmRequest(spec=spec, variants=(("default", ()), ("candidate", params)), rounds=rounds))
        sp = speedup(result.get("default"), result.get("candidate")) if isinstance(result, ConfirmResult) else None
        if sp is None:
            print(f"{mode} confirmation has no figure: {result}")
            return {}
        out[mode] = sp.median
        print(f"  {mode:4} confirmation {sp.median:.3f}x [{sp.low:.3f}, {sp.high:.3f}]", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    candidate_arguments(parser, ROOT / "examples" / "resnet.py")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)

    from tuner.workers import get_executor

    spec, params = candidate_spec(args)
    executors = {mode: get_executor("local", workers=1, warm=mode == "warm") for mode in MODES}
    try:
        candidate, noise = _trials(executors, spec, params, args.pairs)
        confirmed = _confirmed(executors, spec, params, args.rounds) if candidate else {}
    finally:
        for executor in executors.values():
            executor.close()
    if not confirmed:
        return 2
    floor = max(abs(r - 1.0) for mode in MODES for r in noise[mode])
    print(f"\nmodel {args.model}, candidate {dict(params)}, {args.pairs} pairs")
    for mode in MODES:
        print(f"{mode}: trial speedups {', '.join(f'{s:.3f}' for s in candidate[mode])} "
              f"(median {statistics.median(candidate[mode]):.3f}x); defaults self-ratios "
              f"{', '.join(f'{s:.3f}' for s in noise[mode])}; confirmed {confirmed[mode]:.3f}x")
    trial_gap = statistics.median(candidate["warm"]) / statistics.median(candidate["cold"]) - 1.0
    confirm_gap = confirmed["warm"] / confirmed["cold"] - 1.0
    print(f"warm/cold: trial median {100 * trial_gap:+.1f}%, confirmed {100 * confirm_gap:+.1f}%; "
          f"noise floor {100 * floor:.1f}%")
    return 0 if abs(trial_gap) <= floor and abs(confirm_gap) <= floor else 1


if __name__ == "__main__":
    sys.exit(main())
