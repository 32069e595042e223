"""A hand-made kernel tile config row (an H200's matmul) for the kernel table's tests."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from tuner.keys import Platform
from tuner.storage import KernelConfig

WHEN = datetime(2026, 5, 12, 9, 0, 0, 250000, tzinfo=timezone.utc)


PLATFORM = Platform(key="plat-k", hardware_key="hw-k", software_key="sw-k", device="cuda",
                    hardware=(("gpu_name", "NVIDIA H200"),),
                    software=(("torch", "2.11.0+cu128"), ("triton", "3.6.0"), ("tuner", "0.1.0")))


def record(latency_ms: float = 1.25, **changes) -> KernelConfig:
    base = KernelConfig(
        kernel_key="k" * 32, kernel_name="matmul_kernel", platform_key=PLATFORM.key,
        key_args=(("M", 4096), ("N", 4096), ("K", 4096)), dtypes="torch.float16,torch.float16",
        config=(("BLOCK_M", 128), ("BLOCK_N", 256), ("num_warps", 8), ("num_stages", 3)),
        latency_ms=latency_ms, spread_ms=0.02, configs_tried=64, space_size=272, user="alice",
        host="h200-node-7", tuner_version="0.1.0", torch_version="2.11.0+cu128",
        triton_version="3.6.0", created_at=WHEN)
    return dataclasses.replace(base, **changes)

