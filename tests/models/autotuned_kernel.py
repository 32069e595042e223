"""A tiny model whose forward launches a `@tuner.autotune` Triton kernel (tests/kernels/test_kernel_discovery.py).

Load it with TRITON_INTERPRET=1 set before Triton is imported: the kernel then runs on CPU
tensors. Its timer is a replay timer: it launches the config once (so results stay right),
appends the config to the file named by KERNEL_TIMER_LOG (when set), so a test can count
the benchmarks of every process, and reports a latency that depends only on the config:
BLOCK=64 with num_warps=1 wins. With KERNEL_TIMER_FAIL set, the timer raises instead, so
every config fails while tuning.
"""
import json
import os

import torch
import triton
import triton.language as tl
from torch import nn

import tuner

SPACE = {"BLOCK": [32, 64, 128], "num_warps": [1, 2]}


def replay_timer(launch, config):
    log = os.environ.get("KERNEL_TIMER_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(dict(config)) + "\n")
    if os.environ.get("KERNEL_TIMER_FAIL"):
        raise RuntimeError("the replay timer was told to fail")
    launch()
    return 1.0 + abs(config["BLOCK"] - 64) / 64 + config["num_warps"] / 10


@tuner.autotune(space=SPACE, key=["n"], timer=replay_timer)
@triton.jit
def shift_kernel(x_ptr, shift_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(shift_ptr + offsets, mask=mask), mask=mask)


class ShiftedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.register_buffer("shift", torch.randn(8 * 32))

    def forward(self, x):
        h = self.lin(x).contiguous()
        out = torch.empty_like(h)
        n = h.numel()
        shift_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](h, self.shift, out, n)
        return torch.relu(out) * 2


def get_model():
    return ShiftedMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
