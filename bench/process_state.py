"""The default compile's latency in the process states that matter, side by side (issue 41).

    python bench/process_state.py [--models resnet,mlp,gpt2] [--rounds 6] [--db URL]

Per model, rounds of fresh processes taken in a shuffled order, one process per state a round:

- `user`: a process that only loads the model file, compiles it with Inductor's defaults, warms
  up and times (the state a user's program is in; nothing of tuner is imported);
- `trial, pinned`: the state a trial times its default compile in: tuner's `prepare` (the model
  file loaded, eager and float64 references taken, the default compile made and checked), with the
  allocator pinned as every timing process of tuner pins it (`RuntimeConfig.pin_for_timing`);
- `trial, unpinned`: the same without pinning (how trials timed before): the references' frees
  move glibc's dynamic mmap threshold before anything is timed;
- one `user` process per runtime knob setting this machine can run (`tuner.runtime.choices_here`),
  started with that setting's environment.

Each process prints the median of 15 samples (each at least 10 ms of back-to-back calls, after
at least 0.3 s of warm-up). Printed per state: the median over rounds, and the speedup over
`user` as the median of per-round ratios with its interval (about 95% from 6 rounds up).

With `--db URL` (a database a search stored the model's verdict in), also the stored claim against
what fresh processes measure: rounds of `user` (the default compile), `launcher` (`tuner run
--model M` starting a program that compiles with `backend="tuner"`), `backend` (the same program
started plainly) and `emitted` (`tuner best --emit python`'s code, compiled after a default
compile of a copy in the same script, as a user checks a speedup); each one's speedup over `user`
beside the stored figure, and whether the launcher's lies within 5% of it. Not a test: about 2
minutes a model on 2 cores.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"resnet": ROOT / "examples/resnet.py", "mlp": ROOT / "examples/mlp.py",
          "gpt2": ROOT / "bench/models/gpt2_small.py"}
SAMPLES, SAMPLE_S, WARMUP_S = 15, 0.010, 0.3


# --- the child: one process, one state ------------------------------------------------------------

def _load(path: str):
    import torch

    spec = importlib.util.spec_from_file_location("bench_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.get_model().eval()
    torch.manual_seed(0)
    inputs = module.get_inputs()
    return module, model, inputs if isinstance(inputs, tuple) else (inputs,)


def _time(call) -> float:
    """Warm up, then the median of SAMPLES samples, in ms per call: tuner.report.user_view.median_ms,
    written out here because the `user` state imports nothing of tuner (its allocator state is the
    point)."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < WARMUP_S:
        call()
    once = time.perf_counter()
    call()
    calls = max(1, int(SAMPLE_S / max(time.perf_counter() - once, 1e-7)) + 1)
    samples = []
    for _ in range(SAMPLES):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - began) * 1000 / calls)
    return statistics.median(samples)


def child(state: str, model_path: str, emitted: str | None) -> float:
    import torch

    if state.startswith("trial"):
        return _trial_state(model_path, pinned=state == "trial-pinned")
    module, model, inputs = _load(model_path)
    with torch.no_grad():
        if state == "emitted":     # the emitted code after a default compile of a copy, in one script
            _, copy, _ = _load(model_path)
            default = torch.compile(copy)
            default(*inputs)
            spec = importlib.util.spec_from_file_location("tuned_snippet", emitted)
            snippet = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(snippet)
            compiled = snippet.tuned_compile(model)
            with snippet.first_call():
                compiled(*inputs)
        else:
            compiled = torch.compile(model, backend="tuner") if state in ("backend", "launcher") else torch.compile(model)
        return _time(lambda: compiled(*inputs))


def _trial_state(model_path: str, *, pinned: bool) -> float:
    import torch

    from tuner.measure import prepare
    from tuner.runtime import RuntimeConfig
    from tuner.trial import MeasureSpec

    if pinned:
        RuntimeConfig().pin_for_timing()
    runner = prepare(MeasureSpec(model_path), ())
    with torch.no_grad():
        return _time(runner.call)


# --- the parent ------------------------------------------------------------------------------------

def run_state(state: str, model: str, *, env: dict[str, str] | None = None, emitted: str | None = None,
              launcher_db: str | None = None) -> float | None:
    cmd = [sys.executable, __file__, "--child", state, "--model", model] + (["--emitted", emitted] if emitted else [])
    if state == "launcher":
        tuner = str(Path(sys.executable).with_name("tuner"))
        cmd = [tuner, "run", "--db", launcher_db, "--model", model, __file__, "--child", "launcher", "--model", model]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        print(f"  {state}: failed ({out.returncode}): {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])["ms"]


def rounds_of(states: dict[str, dict], model: str, rounds: int, seed: int) -> dict[str, list[float | None]]:
    rng = random.Random(seed)
    got: dict[str, list[float | None]] = {s: [] for s in states}
    for n in range(rounds):
        for state in rng.sample(list(states), len(states)):
            got[state].append(run_state(states[state].get("as", state), model, **states[state].get("args", {})))
        print(f"  round {n + 1}/{rounds}: " + ", ".join(f"{s} {_fmt(v[-1])}" for s, v in got.items()), flush=True)
    return got


def table(got: dict[str, list[float | None]], baseline: str) -> list[str]:
    from tuner.trial import paired_speedup

    rows = [f"  {'state':28s} {'ms (median)':>12s}   speedup over {baseline}"]
    for state, values in got.items():
        ok = [v for v in values if v is not None]
        pairs = [(b, v) for b, v in zip(got[baseline], values) if b is not None and v is not None]
        sp = paired_speedup([b for b, _ in pairs], [v for _, v in pairs]) if state != baseline else None
        rows.append(f"  {state:28s} {_fmt(statistics.median(ok) if ok else None):>12s}   "
                    f"{sp.text() if sp else '-'}")
    return rows


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def process_states(name: str, model: str, rounds: int) -> None:
    from tuner.runtime import RuntimeConfig, choices_here

    settings, notes = choices_here("cpu")
    states: dict[str, dict] = {"user": {}, "trial, pinned": {"as": "trial-pinned"},
                               "trial, unpinned": {"as": "trial-unpinned"}}
    for knob, value in settings:
        env = RuntimeConfig.from_dict({knob: value}).start_env(dict(os.environ))
        states[f"user, {knob.removeprefix('runtime.')}={value}"] = {"as": "user", "args": {"env": env}}
    print(f"{name} ({model}): the default compile, {rounds} rounds of fresh processes" +
          "".join(f"\n  note: {n}" for n in notes), flush=True)
    print("\n".join(table(rounds_of(states, model, rounds, seed=1), "user")), flush=True)


def stored_claim(name: str, model: str, rounds: int, db: str) -> None:
    from tuner.trial import paired_speedup

    tuner = str(Path(sys.executable).with_name("tuner"))
    best = subprocess.run([tuner, "best", model, "--db", db, "--emit", "json"], capture_output=True, text=True)
    if best.returncode:
        print(f"{name}: nothing stored in {db}: {best.stderr.strip()}")
        return
    data = json.loads(best.stdout)
    graphs = data["graphs"]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(data["python"])
    env = {**os.environ, "TUNER_DB": db}
    states = {"user": {}, "launcher": {"args": {"launcher_db": db, "env": env}},
              "backend": {"args": {"env": env}}, "emitted": {"args": {"emitted": f.name, "env": env}}}
    print(f"{name}: stored {data['summary']}; {rounds} rounds of fresh processes", flush=True)
    got = rounds_of(states, model, rounds, seed=2)
    print("\n".join(table(got, "user")))
    pairs = [(b, v) for b, v in zip(got["user"], got["launcher"]) if b is not None and v is not None]
    sp = paired_speedup([b for b, _ in pairs], [v for _, v in pairs])
    claim = graphs[0]["speedup"]
    if sp is not None:
        gap = sp.median / claim - 1
        print(f"  stored claim {claim:.3f}x, launcher measured {sp.text()}: {gap:+.1%} "
              f"({'within' if abs(gap) <= 0.05 else 'OUTSIDE'} 5%)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet,mlp,gpt2")
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--db", default=None, help="also hold each model's stored claim against fresh processes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--emitted", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"ms": child(args.child, args.model, args.emitted)}))
        return 0
    for name in args.models.split(","):
        model = str(MODELS[name])
        process_states(name, model, args.rounds)
        if args.db:
            stored_claim(name, model, args.rounds, args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
