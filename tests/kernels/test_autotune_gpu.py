"""`tuner.autotune` compiled for a CUDA GPU, timed by `triton.testing.do_bench`.

Skipped without a CUDA device. The kernels of tests/helpers/autotune_kernels.py are loaded here as a
separate module, so they compile for the GPU even when tests/kernels/test_autotune.py defined its copy
under the interpreter in this process.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def compiled_kernels() -> Any:
    path = Path(__file__).resolve().parents[1] / "helpers" / "autotune_kernels.py"
    spec = importlib.util.spec_from_file_location("autotune_kernels_compiled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CountedDoBench:
    """Triton's own timer, counted."""

    def __init__(self) -> None:
        from tuner.kernels.bench import DoBenchTimer

        self.timer, self.calls = DoBenchTimer(), 0

    def __call__(self, launch: Any, config: Any) -> Any:
        self.calls += 1
        return self.timer(launch, config)


def test_gpu_miss_then_hit_with_do_bench(tmp_path: Path) -> None:
    import tuner

    kernels = compiled_kernels()
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    space = {"BLOCK_M": [32, 64], "BLOCK_N": [32, 64], "BLOCK_K": [32], "num_warps": [4],
             "num_stages": [2, 3]}
    a = torch.randn(256, 192, device="cuda", dtype=torch.float16)
    b = torch.randn(192, 320, device="cuda", dtype=torch.float16)
    for expect_calls, origin in ((8, "search"), (0, "database")):
        timer = CountedDoBench()
        kernel = tuner.autotune(space=space, key=["M", "N", "K"], timer=timer, db=db)(
            kernels.matmul_kernel)
        c = kernels.launch_matmul(kernel, a, b)
        torch.cuda.synchronize()
        assert timer.calls == expect_calls
        (choice,) = kernel.choices()
        assert choice.origin == origin and choice.stored and choice.latency_ms > 0
        assert torch.allclose(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-2)
