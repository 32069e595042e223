"""Small Triton kernels for tests/kernels/test_autotune.py, and the second process of its miss-then-hit test.

Import this module with Triton's interpreter on (TRITON_INTERPRET=1, or
`triton.knobs.runtime.interpret = True` inside `triton.knobs.runtime.scope()`): `@triton.jit`
picks the interpreter when a kernel is defined, and the kernels then run on CPU tensors.
The kernels call only Triton's builtins (no `tl.cdiv`, `tl.zeros`, `tl.sum`, ...): those library functions
are themselves `@triton.jit` functions, interpreted only when Triton was imported with
TRITON_INTERPRET=1, which a test process that imported Triton earlier cannot promise.

    TRITON_INTERPRET=1 python tests/helpers/autotune_kernels.py DB_URL RESULT_JSON

defines the tuned matmul, launches it once on fixed inputs, and writes what happened:
how often the injected timer ran, which config was launched, where it came from, and
whether the result matched torch.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

MATMUL_SPACE = {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16, 32], "num_warps": [2, 4]}


def matmul_constraint(config: dict[str, Any]) -> bool:
    return config["BLOCK_M"] * config["BLOCK_N"] <= 512


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def accumulate_kernel(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    """acc += x, in place: benchmarking it without restore_value corrupts acc."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    acc = tl.load(acc_ptr + offsets, mask=mask)
    tl.store(acc_ptr + offsets, acc + tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def atomic_add_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    """total += x by atomic adds: total must start at zero (reset_to_zero)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.atomic_add(total_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range(0, K, BLOCK_K):
        kk = k + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def blocks(n: int) -> Any:
    """A 1-D grid for the blocked kernels, from the chosen META."""
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def launch_matmul(kernel: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (M, K), (_, N) = a.shape, b.shape
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1))
    return c


class CountingTimer:
    """A replay timer: launches once (so results can be checked), and reports a latency
    that depends only on the config, so every process ranks configs alike."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []

    def __call__(self, launch: Any, config: Any) -> float:
        self.configs.append(dict(config))
        launch()
        return 10.0 / (1 + sum((i + 1) * int(v) for i, v in enumerate(config.values())))


def main(db_url: str, result_path: str) -> int:
    import tuner

    timer = CountingTimer()
    kernel = tuner.autotune(space=MATMUL_SPACE, key=["M", "N", "K"], constraint=matmul_constraint,
                            timer=timer, db=db_url)(matmul_kernel)
    torch.manual_seed(0)
    a, b = torch.randn(40, 24), torch.randn(24, 36)
    c = launch_matmul(kernel, a, b)
    (choice,) = kernel.choices()
    Path(result_path).write_text(json.dumps({
        "timer_calls": len(timer.configs), "config": choice.config_dict(), "origin": choice.origin,
        "stored": choice.stored, "kernel_key": choice.kernel_key,
        "correct": bool(torch.allclose(c, a @ b, atol=1e-4, rtol=1e-4))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
