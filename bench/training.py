"""Training-step speedups over the default compile, beside each variant's gradient error.

    python bench/training.py [--model examples/train_block.py] [--rounds 10] [--db sqlite:///tuner.db]

One process. Each variant loads the model file afresh under the same seed (identical weights),
builds the file's optimizer and is prepared through `tuner.measure.prepare_training`, the path
`tuner search --mode train` trials take (a variant whose loss or gradients differ from eager is
reported as rejected). Then the variants' whole steps (zero_grad, forward, loss, backward,
optimizer step) are timed in interleaved, shuffled rounds (`tuner.trial.interleaved_rounds`);
the speedup is the median of per-round ratios default/variant with its interval. The error
column is the largest norm-wise relative error of any parameter's gradient after one step,
against eager (`tuner.measure.accuracy.relative_error`). With `--db`, the config stored there for the
model's training graphs on this machine (by `tuner search --mode train`) is a variant too.
Keep it short while others use the machine.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from tuner.measure import Rejected, Runner, prepare_training
from tuner.measure.accuracy import relative_error
from tuner.trial import MeasureSpec, RoundPlan, interleaved_rounds, paired_speedup
from tuner.workload import load_model_file, loss_call, run_step

ROOT = Path(__file__).resolve().parent.parent
BUILT_IN = {"default": (), "eager": None,
            "max-autotune-no-cudagraphs": (("mode", "max-autotune-no-cudagraphs"),),
            "activation_memory_budget=0.5": (("functorch.activation_memory_budget", 0.5),)}


def stored_params(path: Path, db: str) -> tuple[tuple[str, object], ...] | None:
    """The config stored in `db` for the training graphs of `path` on this machine (None: none)."""
    from tuner.platform import current_platform
    from tuner.storage import Store
    from tuner.workload import capture_workload

    loaded = load_model_file(path)
    workload = capture_workload(loaded, grad=True, call=loss_call(loaded))
    platform = current_platform(loaded.device)
    with Store.open(db) as store:
        best = store.best_config(workload.graphs[0].key, platform.key)
    return None if best is None or best.eager else tuple(sorted(best.params.items()))


def gradient_error(path: Path, params: tuple[tuple[str, object], ...] | None) -> float:
    """Largest relative gradient error of one compiled step against eager, from the same weights."""
    from tuner.inductor import compile_config, compile_model

    ref_loaded, got_loaded = load_model_file(path), load_model_file(path)
    reference = run_step(ref_loaded.model, lambda: loss_call(ref_loaded)(ref_loaded.model), None, path)
    model = got_loaded.model if params is None else compile_model(got_loaded.model, compile_config(dict(params)))
    got = run_step(got_loaded.model, lambda: loss_call(got_loaded)(model), None, path)
    mine = dict(got.grads)
    return max(relative_error(ref, mine[name]) for name, ref in reference.grads if ref is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(ROOT / "examples" / "train_block.py"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--db", default=None, help="also time the config stored there by tuner search --mode train")
    args = parser.parse_args()
    path = Path(args.model).resolve()
    variants = dict(BUILT_IN)
    if args.db and (tuned := stored_params(path, args.db)) is not None:
        variants["tuned (stored)"] = tuned
    spec = MeasureSpec(str(path), mode="train")
    runners: dict[str, Runner] = {}
    errors: dict[str, float] = {}
    for label, params in variants.items():
        prepared = prepare_training(spec, params)
        if isinstance(prepared, Rejected):
            print(f"{label}: rejected: {prepared.headline}")
            continue
        runners[label], errors[label] = prepared, gradient_error(path, params)
    plan = RoundPlan(min_rounds=args.rounds, max_rounds=args.rounds, target_width=None, budget_s=None)
    with torch.no_grad():       # each step turns grad on itself, as in a trial
        rounds = interleaved_rounds(runners, plan, baseline="default", rng=random.Random(0))
    print(f"{path.name}: torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds, "
          f"whole training steps")
    print(f"{'variant':<30} {'step ms':>8} {'speedup':>8} {'interval':>14} {'max grad rel err':>17}")
    for label in runners:
        sp = paired_speedup(rounds["default"], rounds[label])
        ms = sorted(rounds[label])[len(rounds[label]) // 2]
        print(f"{label:<30} {ms:>8.2f} {sp.median:>7.2f}x {f'[{sp.low:.2f}, {sp.high:.2f}]':>14} "
              f"{errors[label]:>17.2e}")


if __name__ == "__main__":
    main()
