"""Section 9 of bench/gpu_check.py: a Triton matmul tuned by `tuner.autotune`, against
`triton.autotune` over the same configs and against `torch.mm`; then a second process that
shares the kernel database (the tuned kernel must launch its stored config, benchmarking
nothing, while `triton.autotune` benchmarks again, unless its opt-in `cache_results` is on:
both are timed).

Two kernels with one tile body (`_matmul_tile`): their sources differ, so neither inherits
the other's compiled binaries from Triton's caches and both tuning times include compiling.
The second process is this file run as a script:

    python3 -P bench/gpu/gpu_matmul.py --second-process DB_URL [--smoke]

which prints one line `RESULT {json}`. With `--smoke` (no GPU: under TRITON_INTERPRET=1)
the shapes and the space are tiny and the timings mean nothing; it checks the plumbing.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl

GPU_SHAPES = ((4096, 4096, 4096), (1024, 1024, 8192))      # two: the section has 30 s
SMOKE_SHAPES = ((64, 48, 32),)
GPU_SPACE = {"BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64], "GROUP_M": [8],
             "num_warps": [4, 8], "num_stages": [3, 4]}
SMOKE_SPACE = {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16], "GROUP_M": [2],
               "num_warps": [4], "num_stages": [2]}
SMEM_BYTES = 200 * 1024         # under the H100/H200 228 KiB per block, with room to spare
CAN_CACHE = "cache_results" in inspect.signature(triton.autotune).parameters   # Triton >= 3.3
MAX_REL_ERROR = 1e-2            # fp16 output against an fp32 reference, relative to its largest value


def constraint(config: dict[str, Any]) -> bool:
    """18 of the 72 combinations, tiles that suit a Hopper GPU: not 256x256; 8 warps for the
    largest tiles, 4 for the rest, both for 128x128; 4 stages of 32-wide K or 3 of 64-wide;
    and the pipelined tiles within shared memory. Each config compiles twice (once per
    autotuner) in about a second: keep the space this small."""
    m, n, k, stages = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_stages"]
    warps = (8,) if m * n >= 128 * 256 else (4, 8) if m == n == 128 else (4,)
    smem = (m + n) * k * 2 * stages
    return m * n <= 128 * 256 and config["num_warps"] in warps and (k, stages) in ((32, 4), (64, 3)) \
        and smem <= SMEM_BYTES


@triton.jit
def _matmul_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                 stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B, fp32 accumulation, grouped launch order for L2 reuse."""
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    group_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % group_m)
    pid_n = (pid % width) // group_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def matmul_tuner(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                 stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    _matmul_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                 stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


@triton.jit
def matmul_triton(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    _matmul_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                 stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


def make_tuned(db_url: str, *, smoke: bool) -> Any:
    """The `tuner.autotune` kernel, its winners kept in the database at `db_url`."""
    import tuner

    return tuner.autotune(space=SMOKE_SPACE if smoke else GPU_SPACE, key=["M", "N", "K"],
                          constraint=None if smoke else constraint, db=db_url)(matmul_tuner)


def make_baseline(tuned: Any, *, cache_results: bool) -> Any:
    """A `triton.autotune` kernel over the same configs. `cache_results` turns on Triton's own
    opt-in disk cache of autotuning timings (in TRITON_CACHE_DIR; off by default)."""
    extra = {"cache_results": True} if cache_results and CAN_CACHE else {}
    return triton.autotune(configs=list(tuned.configs), key=["M", "N", "K"], **extra)(matmul_triton)


def launch(kernel: Any, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    (M, K), N = a.shape, b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1))
    return c


def operands(shape: tuple[int, int, int], device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    M, N, K = shape
    dtype = torch.float16 if device == "cuda" else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(M, K, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(K, N, generator=gen).to(device=device, dtype=dtype)
    return a, b, torch.empty(M, N, device=device, dtype=dtype)


def rel_error(got: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    ref = a.float() @ b.float()
    return float((got.float() - ref).abs().max() / ref.abs().max())


def timed_first(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Seconds until the first call's result is ready."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def tflops(shape: tuple[int, int, int], ms: float) -> float:
    M, N, K = shape
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def first_process(db_url: str, *, smoke: bool, bench_ms: Callable[[Callable[[], Any]], float],
                  sync: Callable[[], None]) -> list[dict[str, Any]]:
    """Tune each shape with both autotuners (timed), then time the three steady states."""
    device = "cpu" if smoke else "cuda"
    tuned = make_tuned(db_url, smoke=smoke)
    baseline = make_baseline(tuned, cache_results=not smoke)     # it caches for the second process
    print(f"  configs: {len(tuned.configs)} after the constraint")
    rows = []
    for shape in SMOKE_SHAPES if smoke else GPU_SHAPES:
        a, b, c = operands(shape, device)
        torch.mm(a, b)
        row: dict[str, Any] = {"shape": "x".join(map(str, shape))}
        row["tuner_tune_s"] = timed_first(partial(launch, tuned, a, b, c), sync)
        choice = tuned.choices()[-1]        # the key launched last: this shape's
        row.update(tuner_config=tuned.stored_form(tuned.best_config), tuner_tried=choice.configs_tried, stored=choice.stored,
                   tuner_err=rel_error(c, a, b))
        c2 = torch.empty_like(c)
        if smoke:
            row.update(triton_tune_s=None, triton_config=None, triton_err=None, triton_ms=None)
        else:
            row["triton_tune_s"] = timed_first(partial(launch, baseline, a, b, c2), sync)
            row.update(triton_config=str(baseline.best_config), triton_err=rel_error(c2, a, b))
            row["triton_ms"] = bench_ms(partial(launch, baseline, a, b, c2))
        row["tuner_ms"] = bench_ms(partial(launch, tuned, a, b, c))
        row["mm_ms"] = bench_ms(partial(torch.mm, a, b))
        row["mm_err"] = rel_error(torch.mm(a, b), a, b)
        rows.append(row)
        print_row(shape, row)
    return rows


def print_row(shape: tuple[int, int, int], row: dict[str, Any]) -> None:
    def perf(ms: float | None) -> str:
        return "n/a" if ms is None else f"{ms:.3f} ms {tflops(shape, ms):6.1f} TFLOP/s"

    tt = row["triton_tune_s"]
    print(f"  {row['shape']}: tuning {row['tuner_tune_s']:.2f} s ({row['tuner_tried']} configs, stored "
          f"{row['stored']}) vs triton.autotune {'n/a' if tt is None else f'{tt:.2f} s'}")
    print(f"    tuner.autotune  {perf(row['tuner_ms'])}  err {row['tuner_err']:.1e}  {row['tuner_config']}")
    if row["triton_ms"] is not None:
        print(f"    triton.autotune {perf(row['triton_ms'])}  err {row['triton_err']:.1e}  {row['triton_config']}")
    print(f"    torch.mm        {perf(row['mm_ms'])}  err {row['mm_err']:.1e}")


def second_process(db_url: str, *, smoke: bool) -> dict[str, Any]:
    """The same kernels in a fresh process: time to the first result of each, per shape."""
    device = "cpu" if smoke else "cuda"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tuned = make_tuned(db_url, smoke=smoke)
    cached, plain = make_baseline(tuned, cache_results=True), make_baseline(tuned, cache_results=False)
    out = []
    for shape in SMOKE_SHAPES if smoke else GPU_SHAPES:
        a, b, c = operands(shape, device)
        torch.mm(a, b)
        sync()
        row: dict[str, Any] = {"shape": "x".join(map(str, shape))}
        row["tuner_first_s"] = timed_first(partial(launch, tuned, a, b, c), sync)
        choice = tuned.choices()[-1]
        row.update(origin=choice.origin, configs_tried=choice.configs_tried, tuner_err=rel_error(c, a, b))
        if not smoke:
            c2 = torch.empty_like(c)
            if CAN_CACHE:
                row["triton_cached_first_s"] = timed_first(partial(launch, cached, a, b, c2), sync)
            row["triton_first_s"] = timed_first(partial(launch, plain, a, b, c2), sync)
            row["triton_err"] = rel_error(c2, a, b)
        out.append(row)
    return {"shapes": out, "ray_imported": "ray" in sys.modules}


def section_matmul(check: Any) -> list[str]:
    """Section 9 of bench/gpu_check.py: tune here, then the second process on the same database."""
    from gpu_common import stream

    gm = sys.modules[__name__]
    db = f"sqlite:///{check.run_dir / 'kernels.db'}"
    rows = gm.first_process(db, smoke=check.smoke, bench_ms=check.bench_ms, sync=check.sync)
    print("  second process, same database: time to the first result")
    start = time.monotonic()
    code, lines = stream(check.python(__file__, "--second-process", db, *(["--smoke"] if check.smoke else [])),
                         cwd=check.run_dir, timeout_s=check.left() - 1, env=check.env)
    results = [json.loads(ln[len("RESULT "):]) for ln in lines if ln.startswith("RESULT ")]
    if code != 0 or not results:
        raise RuntimeError(f"the second process exited with {code} and no result")
    second = results[0]
    figures, problems = [], []
    for row, again in zip(rows, second["shapes"], strict=True):
        tt, tc = again.get("triton_first_s"), again.get("triton_cached_first_s")
        print(f"  {again['shape']}: tuner.autotune {again['tuner_first_s']:.3f} s (origin {again['origin']}, "
              f"{again['configs_tried']} configs benchmarked); triton.autotune "
              f"{'n/a' if tt is None else f'{tt:.2f} s'}, with cache_results=True "
              f"{'n/a' if tc is None else f'{tc:.3f} s'}")
        figures.append(f"{row['shape']}: tuning s tuner/autotune {row['tuner_tune_s']:.1f}/"
                       f"{_num(row['triton_tune_s'], '.1f')}"
                       f"; ms tuner/autotune/mm {row['tuner_ms']:.3f}/{_num(row['triton_ms'], '.3f')}/"
                       f"{row['mm_ms']:.3f}; 2nd process first call s {again['tuner_first_s']:.2f} "
                       f"({again['origin']})/{_num(tt, '.2f')} (cache_results {_num(tc, '.2f')})")
        errors = [row["tuner_err"], row["triton_err"], again["tuner_err"], again.get("triton_err")]
        if any(e is not None and e > gm.MAX_REL_ERROR for e in errors):
            problems.append(f"{row['shape']} differs from the fp32 reference ({max(e or 0 for e in errors):.1e})")
        if not row["stored"] or again["origin"] != "database" or again["configs_tried"]:
            problems.append(f"{row['shape']}: stored {row['stored']}, second process origin {again['origin']}")
    if second["ray_imported"]:
        problems.append("the second process imported ray")
    print(f"  second process: {time.monotonic() - start:.1f} s in all (import, launch, exit)")
    if problems:
        raise AssertionError("; ".join(problems))
    return figures


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--second-process", metavar="DB_URL", required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    print("RESULT " + json.dumps(second_process(args.second_process, smoke=args.smoke)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
