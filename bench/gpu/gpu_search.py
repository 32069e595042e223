"""Section 1 of bench/gpu_check.py: one real model searched end to end, then its stored config
re-measured in a fresh process against the built-in modes.

The model: a GPT-2-style decoder built from a `transformers` config (random weights, no
download; bf16, 2 layers of width 768, batch 8 x 512 tokens, an 8192-token vocabulary) when
transformers imports, else the conv net of bench/gpu/gpu_models.py. Its file declares the bare
`DEVICE = "cuda"` (issue 33: every process turns it into `cuda:0`). Then:
  1. `tuner search MODEL --executor local` (no Ray on the GPU machine) into search.db, and its summary;
  2. the stored verdict (`tuner.search.prepare_target` + the store, as bench/side_by_side.py reads
     it) measured in ONE fresh process by bench/side_by_side.py's child (`run_confirmation`: every
     variant compiled and checked against eager, then rounds interleaved and shuffled): eager, the
     default compile, the tuned config, `mode max-autotune` and `mode reduce-overhead`; each
     variant's median ms and its paired speedup over the default compile (median of per-round
     ratios, with its ~95% interval). A verdict of "defaults" makes `tuned` a second default
     compile: its row is the noise floor;
  3. `tuner compare MODEL` on the same database, when COMPARE_S are left: the product's own
     compare path on the bare-"cuda" model (the device selected, its GPU synchronised, compiles
     under its compile lock, rounds under its measure lock; issue 33 defect 6). Otherwise the
     section says it did not run and how to give it the time.
The search gets what the section's cap leaves beyond REMEASURE_S; in --smoke, toy sizes on CPU.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

GPU_SEARCH = ["--trials", "3", "--repeat", "10", "--rounds", "12", "--timeout", "50"]
SMOKE_SEARCH = ["--trials", "1", "--repeat", "3", "--rounds", "12", "--timeout", "120"]
REMEASURE_ROUNDS = 12
REMEASURE_S = 75.0        # kept for the re-measure: five compiles (one max-autotune) and the rounds
MODES = ("max-autotune", "reduce-overhead")
COMPARE_S = 45.0          # what `tuner compare` needs left: three compiles of the model and 6 rounds

GPT2_MODEL = '''"""A GPT-2-style decoder from a transformers config (random weights), written by bench/gpu_check.py."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

DEVICE = "{device}"
BATCH, TOKENS, VOCAB = {batch}, {tokens}, {vocab}


def get_model():
    config = GPT2Config(n_layer={layers}, n_embd={width}, n_head={heads}, n_positions=TOKENS, vocab_size=VOCAB, use_cache=False)
    return GPT2LMHeadModel(config).to(torch.{dtype}).eval()


def get_inputs():
    return {{"input_ids": torch.randint(0, VOCAB, (BATCH, TOKENS))}}
'''
GPT2_SIZES = {False: dict(device="cuda", batch=8, tokens=512, vocab=8192, layers=2, width=768, heads=12, dtype="bfloat16"),
              True: dict(device="cpu", batch=1, tokens=16, vocab=128, layers=1, width=32, heads=2, dtype="float32")}


def transformers_imports() -> str | None:
    """None when `transformers` imports here, else why not (one line)."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed"
    try:
        import transformers  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: use the conv net
        return f"import transformers failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    return None


def write_model(check: Any) -> tuple[str, Path]:
    """(its name, the model file) for this run: GPT-2 from a config when transformers imports, else the conv net."""
    why_not = transformers_imports()
    if why_not is None:
        path = check.run_dir / "gpt2_model.py"
        path.write_text(GPT2_MODEL.format(**GPT2_SIZES[check.smoke]))
        return "gpt2 (transformers config)", path
    print(f"  {why_not}: the conv net instead")
    return "conv net (bench/gpu/gpu_models.py)", check.model("conv")


def section_search(check: Any) -> list[str]:
    from gpu_common import stream

    name, model = write_model(check)
    db = f"sqlite:///{check.run_dir / 'search.db'}"
    env = {**check.env, "TUNER_DB": db}
    args = ["-m", "tuner", "search", str(model), "--executor", "local", *(SMOKE_SEARCH if check.smoke else GPU_SEARCH)]
    code, lines = stream(check.python(*args), cwd=check.run_dir, env=env,
                         timeout_s=check.left() - (0 if check.smoke else REMEASURE_S) - 10)
    if code is None:
        raise TimeoutError(f"tuner search of {name} was stopped at its share of the cap; rerun: --sections search "
                           f"--cap search=400")
    if code != 0:
        raise RuntimeError(f"tuner search of {name} exited {code}")
    figures = [f"model: {name}", *summary_rows(lines)]
    figures += remeasure(check, model, db)
    return figures + compare(check, model, env)


def compare(check: Any, model: Path, env: dict[str, str]) -> list[str]:
    """`tuner compare` on the stored verdict, in a fresh process, when the cap leaves time for it."""
    from gpu_common import stream

    if check.left() < COMPARE_S:
        return [f"tuner compare: not run, {check.left():.0f} s left of the cap (needs {COMPARE_S:.0f}); "
                f"rerun: --sections search --cap search=400"]
    code, lines = stream(check.python("-m", "tuner", "compare", str(model), "--rounds", "6"), cwd=check.run_dir,
                         env=env, timeout_s=check.left() - 3)
    if code is None:
        raise TimeoutError("tuner compare was stopped at the section's cap; rerun: --sections search --cap search=400")
    if code != 0:
        raise RuntimeError(f"tuner compare exited {code}: {lines[-1] if lines else ''}")
    return ["tuner compare: " + line.strip() for line in lines if line.startswith(("torch.compile", "tuner.compile"))]


def remeasure(check: Any, model: Path, db: str) -> list[str]:
    """The stored verdict against eager, the defaults and the modes, in one fresh process."""
    from gpu_common import bench_module

    from tuner.search import prepare_target
    from tuner.storage import Store
    from tuner.trial import DEFAULT, EAGER, ConfirmRequest, MeasureSpec

    side = bench_module("side_by_side")
    target = prepare_target(str(model))
    with Store.open(db, readonly=True) as store:
        best = store.best_config(target.workload.graphs[0].key, target.platform.key)
    if best is None:
        raise RuntimeError(f"the search stored no verdict for platform {target.platform.key}")
    stored = side.Stored(best=best, graphs=len(target.workload.graphs), differing=0)
    del target
    variants = [(EAGER, None), (DEFAULT, ()), ("tuned", () if stored.params is None else stored.params),
                *((f"mode {m}", (("mode", m),)) for m in MODES)]
    print(f"  stored: {stored.describe()}, claimed {stored.claimed()}; re-measured in a fresh process, "
          f"{REMEASURE_ROUNDS} rounds, against {', '.join(MODES)}")
    request = ConfirmRequest(spec=MeasureSpec(str(model), timeout_s=max(30.0, check.left() - 5)),
                             variants=tuple(variants), rounds=REMEASURE_ROUNDS)
    measured = side.measure(request, ceiling=False, timeout_s=max(30.0, check.left() - 3))
    return [f"stored {stored.describe()}: claimed {stored.claimed()}"] + rows(measured.result, side.interval)


def rows(result: Any, interval: Any) -> list[str]:
    """One line per variant: median ms and the paired speedup over the default compile."""
    from tuner.trial import DEFAULT

    base = result.get(DEFAULT)
    lines = []
    for v in result.variants:
        if not v.round_ms:
            lines.append(f"{v.label}: {v.status.value} {(v.error or '').splitlines()[0][:100] if v.error else ''}")
            continue
        ms = sorted(v.round_ms)[len(v.round_ms) // 2]
        if base is None or not base.round_ms or v.label == DEFAULT:
            lines.append(f"{v.label}: {ms:.4f} ms")
            continue
        median, low, high = interval([b / c for b, c in zip(base.round_ms, v.round_ms)])
        lines.append(f"{v.label}: {ms:.4f} ms, {median:.3f}x [{low:.3f}, {high:.3f}] over the default compile")
    for line in lines:
        print(f"  {line}")
    return lines


def summary_rows(lines: list[str]) -> list[str]:
    """The search's summary table (eager, default, best mode, tuned) and its `stored:` line."""
    first = next((i for i, ln in enumerate(lines) if "latency ms" in ln and "confirmed" in ln), None)
    if first is None:
        return []
    found = []
    for line in lines[first:]:
        if line.strip() and not set(line.strip()) <= set("-+| "):
            found.append(" ".join(line.split()))
        if line.startswith("stored:"):
            break
    return found
