"""Freezing, max-autotune and the C++ GEMM knobs on the linear-heavy models, and what feeding
the harvested GEMM choices saves at compile time.

    python bench/gemm_choices.py [--models gpt2,bert] [--rounds 10] [--timeout 3600]

Per model (bench/models/gpt2.py, bert.py), two fresh processes:

1. Side by side (`side_by_side.measure`, i.e. `tuner.measure.run_confirmation`: paired,
   interleaved, shuffled rounds in one process): the default compile, freezing, freezing +
   max_autotune, and freezing + max_autotune + the `cpp.gemm_*` knobs below. Prints the median
   latency, the paired speedup over the default compile, and each variant's compile seconds.
   The trial process harvests the GEMMs Inductor autotunes into a fresh SQLite file
   (`MeasureSpec.kernel_db`), as a `tuner search` trial does.
2. Compile seconds with and without the harvested choices: one process compiles freezing +
   max_autotune four times, alternating without and with `tuner.inductor.gemm_choices.feeding` (the lookup's
   feed), each on a fresh load of the model, Inductor's own autotune cache off (as on a machine
   that has not compiled the model before); prints per compile its seconds, the GEMMs Inductor
   autotuned (its own counter), the largest difference to the first compile's output and, when
   not fed, how many GEMMs chose the stored winner; then whether the two fed compiles agree bit for bit.

Not a test: about 10-20 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from side_by_side import ROOT, interval, measure

MODELS = {"gpt2": "bench/models/gpt2.py", "bert": "bench/models/bert.py"}
FREEZE = (("freezing", True),)
AUTOTUNE = (("freezing", True), ("max_autotune", True))
KNOBS = AUTOTUNE + (("cpp.gemm_cache_blocking", "4,2,256"), ("cpp.gemm_max_k_slices", 0))
VARIANTS = (("default", ()), ("freezing", FREEZE), ("freezing + max_autotune", AUTOTUNE),
            ("freezing + max_autotune + cpp.gemm_*", KNOBS))


def side_by_side(path: str, db_url: str, args: argparse.Namespace) -> None:
    from tuner.trial import ConfirmRequest, MeasureSpec, speedup

    request = ConfirmRequest(spec=MeasureSpec(path, timeout_s=args.timeout, kernel_db=db_url),
                             variants=VARIANTS, rounds=args.rounds)
    measured = measure(request, ceiling=False, timeout_s=args.timeout)
    result = measured.result
    base = result.get("default")
    print(f"   side by side in one process ({measured.seconds:.0f} s, {args.rounds} rounds, "
          f"{result.threads} threads)")
    print(f"   {'variant':<40}{'median ms [interval]':<30}{'vs default':<22}compile s")
    for v in result.variants:
        if not v.round_ms:
            print(f"   {v.label:<40}{v.status.value}: {(v.error or '').strip().splitlines()[:1]}")
            continue
        ms, lo, hi = interval(v.round_ms)
        sp = speedup(base, v)
        sp_text = f"{sp.median:5.2f}x [{sp.low:.2f}, {sp.high:.2f}]" if sp else "-"
        print(f"   {v.label:<40}{f'{ms:8.3f} [{lo:.3f}, {hi:.3f}]':<30}{sp_text:<22}{v.compile_s or 0:7.1f}")


def compile_seconds(path: str, db_url: str, timeout_s: float) -> None:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", path, db_url],
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the compile-time process exited with {proc.returncode}: {proc.stderr[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("   "):
            print(line)


def child(path: str, db_url: str) -> int:
    """Compile freezing + max_autotune without, with, without, with the fed choices; print each."""
    import torch
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    from tuner.inductor import compile_config, compile_model
    from tuner.inductor.gemm_choices import feeding, harvesting
    from tuner.lookup import Lookup
    from tuner.platform import current_platform
    from tuner.settings import Settings
    from tuner.workload import flatten_outputs, load_model_file

    inductor_config.autotune_local_cache = False
    lookup, platform = Lookup(Settings(db_url=db_url)), current_platform("cpu")
    outputs: list[list[torch.Tensor]] = []
    print(f"   compile seconds of freezing + max_autotune ({torch.get_num_threads()} threads, "
          f"Inductor's autotune cache off):")
    for fed in (False, True, False, True):
        torch._dynamo.reset()
        counters.clear()
        loaded = load_model_file(path)
        model = compile_model(loaded.model, compile_config(dict(AUTOTUNE)))
        start = time.perf_counter()
        feed_or_not = feeding(lambda key: lookup.gemm_winner(key, platform.key)) if fed else nullcontext()
        with torch.no_grad(), feed_or_not as feed, harvesting() as autotuned:
            outputs.append(flatten_outputs(loaded.call(model)))
        seconds = time.perf_counter() - start
        if fed:
            note = f"{feed.fed} GEMMs fed, {feed.missed} not found"
        else:   # what this compile's own autotuning chose, against the stored winners
            same = sum(lookup.gemm_winner(g.key, platform.key) == g.winner for g in autotuned)
            note = f"{same} of {len(autotuned)} chose the stored winner"
        diff = max(float((a - b).abs().max()) for a, b in zip(outputs[0], outputs[-1]))
        print(f"   {'fed    ' if fed else 'not fed'} {seconds:7.1f} s  autotuned GEMMs "
              f"{counters['inductor']['select_algorithm_autotune']:3d}  max diff to the first {diff:.2e}  ({note})")
    fed_same = all(torch.equal(a, b) for a, b in zip(outputs[1], outputs[3]))
    print(f"   the two fed compiles bit-identical: {fed_same}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,bert")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    for name in args.models.split(","):
        path = str(ROOT / MODELS[name])
        with tempfile.TemporaryDirectory(prefix="tuner-gemm-") as tmp:
            db_url = f"sqlite:///{tmp}/tuner.db"
            from tuner.storage import upgrade

            upgrade(db_url)
            print(f"\n== {name} ({MODELS[name]})")
            side_by_side(path, db_url, args)
            compile_seconds(path, db_url, args.timeout)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2], sys.argv[3]))
    sys.exit(main())
