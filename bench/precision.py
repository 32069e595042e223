"""Speedup of each precision mode over fp32, beside its measured error, for the examples.

    python bench/precision.py [--rounds 15] [--models mlp,transformer,convnet]

One process; each model is compiled once per mode through `tuner.inductor.compiler` (the path trials
and lookup share), then timed in interleaved rounds, shuffled per round; the speedup is the
median of per-round ratios fp32/mode, with the interquartile range of those ratios. The error
is `tuner.measure.accuracy.relative_error` against fp32 eager on the file's inputs. Keep it short
while others use the machine.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

from tuner.inductor import compile_config, compile_model
from tuner.measure.accuracy import relative_error
from tuner.precision import FP32
from tuner.workload import flatten_outputs, load_model_file

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODES = (FP32, "bf16-autocast", "bf16")


def bench(path: Path, rounds: int, calls: int) -> list[tuple[str, float, float, float]]:
    """(mode, median speedup over fp32, its IQR, max relative error) per mode."""
    loaded = load_model_file(path)
    runners, errors = {}, {}
    with torch.no_grad():
        reference = flatten_outputs(loaded.call())
        for mode in MODES:
            compiled = compile_model(loaded.model, compile_config({} if mode == FP32 else {"precision": mode}))
            out = flatten_outputs(loaded.call(compiled))
            errors[mode] = max(relative_error(r, o) for r, o in zip(reference, out))
            runners[mode] = compiled
        ratios: dict[str, list[float]] = {m: [] for m in MODES}
        rng = random.Random(0)
        for _ in range(rounds):
            order, ms = list(MODES), {}
            rng.shuffle(order)
            for mode in order:
                start = time.perf_counter()
                for _ in range(calls):
                    loaded.call(runners[mode])
                ms[mode] = (time.perf_counter() - start) / calls
            for mode in MODES:
                ratios[mode].append(ms[FP32] / ms[mode])
    rows = []
    for mode in MODES:
        q = statistics.quantiles(ratios[mode], n=4)
        rows.append((mode, statistics.median(ratios[mode]), q[2] - q[0], errors[mode]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5, help="calls per mode per round")
    parser.add_argument("--models", default="mlp,transformer")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.calls} calls")
    print(f"{'model':<12} {'mode':<14} {'speedup':>8} {'IQR':>6} {'max rel err':>12}")
    for name in args.models.split(","):
        for mode, speedup, iqr, err in bench(EXAMPLES / f"{name}.py", args.rounds, args.calls):
            print(f"{name:<12} {mode:<14} {speedup:>7.2f}x {iqr:>6.2f} {err:>12.2e}")


if __name__ == "__main__":
    main()
