"""Section 7 of bench/gpu_check.py: a `tuner.autotune` kernel inside `torch.compile` (issue 23).

Three fresh processes on one kernel database, each `python bench/gpu/gpu_compile_kernels.py MODE DB
[--smoke]`, each printing one `RESULT {json}` line:
  tune:     an eager launch of the `tuner.autotune` kernel: it searches and stores (do_bench);
  tuner:    `torch.compile(fullgraph=True)` of a function launching it: graphs and graph breaks
            (`torch._dynamo.explain`), the configs Inductor was handed (1 on a database hit:
            nothing to benchmark), the configs the kernel's own timer ran (0), first-call time;
  triton:   the same for the same kernel under `@triton.autotune`, whose configs all reach Inductor.
On a GPU, Dynamo traces both as Triton `Autotuner`s (tuner's DB-first `early_config_prune`
prunes to the stored config). In --smoke (CPU, interpreter) Dynamo cannot trace Triton: the
tuner kernel is one `tuner::launch_kernel` op, and the triton row is skipped.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

CONFIGS = [(32, 1), (64, 2), (128, 4), (256, 4), (512, 8), (1024, 8)]     # (BLOCK, num_warps)


def build(kind: str, db: str, counter: list[int]) -> Any:
    import triton
    import triton.language as tl

    import tuner

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in CONFIGS]

    def do_bench(kernel_call: Any, quantiles: Any) -> Any:
        counter[0] += 1
        from triton.testing import do_bench as triton_do_bench

        if not torch_cuda():
            kernel_call()
            return [1.0 / counter[0]] * 3
        return triton_do_bench(kernel_call, quantiles=quantiles)

    decorator = (tuner.autotune(configs=configs, key=["n"], do_bench=do_bench, db=db) if kind == "tuner"
                 else triton.autotune(configs=configs, key=["n"]))

    @decorator
    @triton.jit
    def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x * alpha + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    return scale_add


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def forward(kernel: Any) -> Any:
    import torch
    import triton

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x)
        out = torch.empty_like(h)
        n = h.numel()
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](h, y, out, n, 0.5)
        return out + 1
    return f


def run(mode: str, db: str, smoke: bool) -> dict[str, Any]:
    import torch
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    device = "cpu" if smoke else "cuda"
    n = 4096 if smoke else 1 << 22
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    counter = [0]
    kernel = build("triton" if mode == "triton" else "tuner", db, counter)
    f = forward(kernel)
    want = torch.relu(x) * 0.5 + y + 1
    if mode == "tune":
        got = f(x, y)
        return {"mode": mode, "timer_calls": counter[0], "origin": kernel.choices()[0].origin,
                "stored": kernel.choices()[0].stored, "ok": bool(torch.allclose(got, want, atol=1e-5))}
    explained = torch._dynamo.explain(f)(x, y)
    torch._dynamo.reset()
    start = time.perf_counter()
    got = torch.compile(f, fullgraph=True)(x, y)
    if not smoke:
        torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    handed = [len(k.configs) for k in getattr(kernel_side_table, "id_to_kernel", {}).values()
              if hasattr(k, "configs")]
    return {"mode": mode, "graphs": explained.graph_count, "breaks": explained.graph_break_count,
            "configs_to_inductor": min(handed) if handed else None, "timer_calls": counter[0],
            "first_call_s": round(first_s, 3), "ok": bool(torch.allclose(got, want, atol=1e-5))}


def section_compile(check: Any) -> list[str]:
    db = f"sqlite:///{check.run_dir / 'compile-kernels.db'}"
    results = {}
    for mode in ("tune", "tuner", "triton"):
        if mode == "triton" and check.smoke:
            print("  triton.autotune: skipped in --smoke (Dynamo cannot trace Triton on CPU)")
            continue
        cmd = check.python(__file__, mode, db, *(["--smoke"] if check.smoke else []))
        print(f"  $ {' '.join(cmd[1:])}", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True, env=check.env, cwd=check.run_dir,
                              timeout=max(10.0, min(240.0, check.left())))
        code, lines = done.returncode, done.stdout.splitlines()
        print("\n".join("  | " + ln for ln in (done.stdout + done.stderr).splitlines()[-15:]), flush=True)
        got = [json.loads(ln[len("RESULT "):]) for ln in lines if ln.startswith("RESULT ")]
        if code != 0 or not got:
            raise RuntimeError(f"the {mode} process exited with {code} and no result")
        results[mode] = got[0]
    problems = []
    tune, tuned = results["tune"], results["tuner"]
    if not (tune["ok"] and tune["stored"] and tune["origin"] == "search"):
        problems.append(f"the eager launch did not tune and store: {tune}")
    for mode, r in results.items():
        if mode != "tune" and (not r["ok"] or (r["graphs"], r["breaks"]) != (1, 0)):
            problems.append(f"{mode}: {r['graphs']} graph(s), {r['breaks']} break(s), ok {r['ok']}")
    if tuned["timer_calls"] or (not check.smoke and tuned["configs_to_inductor"] != 1):
        problems.append(f"tuner under compile: {tuned['timer_calls']} benchmarks, "
                        f"{tuned['configs_to_inductor']} config(s) handed to Inductor")
    figures = [f"{m}: {r['graphs']} graph, {r['breaks']} breaks, {r['configs_to_inductor']} config(s) to "
               f"Inductor, {r['timer_calls']} tuner benchmarks, first call {r['first_call_s']:.2f} s"
               for m, r in results.items() if m != "tune"]
    if problems:
        raise AssertionError("; ".join(problems))
    return figures


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--smoke"]
    print("RESULT " + json.dumps(run(args[0], args[1], "--smoke" in sys.argv)), flush=True)
