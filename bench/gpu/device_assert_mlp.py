"""An MLP whose compile with one knob value fires a device-side assert at its first call (issue 33):
the model file bench/gpu_check.py's section 4 confirms, with every other compile sound.

`gather` is a custom op (rows of its input, an index_select) in `forward`. Its fake
implementation runs while AOTAutograd traces the graph inside `compile_fx`, where the config's
knobs are patched in, so it sees the knobs of the compile it is part of: under
`max_fusion_size == CRASH_AT` it arms the op, and the compiled call then selects rows past the
end. On a GPU that is a device-side assert in index_select's kernel, raised asynchronously at the
first synchronisation, and the process's CUDA context is poisoned for every later call; on CPU an
IndexError. Eager and every other compile select rows in range: their outputs are the input's.
Each load of the file (one per variant) registers an op of its own, so a load's state is its own.
Run it with Inductor's caches off (a cache hit would skip the trace that arms it);
bench/gpu_check.py writes a copy with DEVICE set for the run (as tests/models/knob_crash_mlp.py does).
"""
import sys

import torch
from torch import nn

DEVICE = "cuda"
CRASH_AT = 8

_LOAD = getattr(sys, "_device_assert_loads", 0) + 1
sys._device_assert_loads = _LOAD
_armed = False


@torch.library.custom_op(f"device_assert::gather{_LOAD}", mutates_args=())
def gather(x: torch.Tensor) -> torch.Tensor:
    rows = torch.arange(x.shape[0], device=x.device)
    if _armed:
        rows = rows + x.shape[0]        # every row past the end: an out-of-range index on the device
    return x.index_select(0, rows)


@gather.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    global _armed
    if torch._inductor.config.max_fusion_size == CRASH_AT:
        _armed = True
    return torch.empty_like(x)


class DeviceAssertMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))

    def forward(self, x):
        return gather(self.net(x))


def get_model():
    return DeviceAssertMLP().eval()


def get_inputs():
    return (torch.randn(32, 64),)
