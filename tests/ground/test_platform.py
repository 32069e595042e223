"""Platform keys: stable for one machine and thread count, rebuilt identically from parts."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from tuner.errors import UsageError
from tuner.platform import Platform, current_platform, platform_from_parts


def test_cpu_platform_describes_hardware_and_software() -> None:
    p = current_platform()
    hw, sw = dict(p.hardware), dict(p.software)
    assert p.device == "cpu" and len(p.key) == len(p.hardware_key) == len(p.software_key) == 24
    assert set(hw) == {"cpu_model", "vec_isa", "cores", "threads", "machine"}
    assert hw["threads"] == str(torch.get_num_threads()) and hw["cpu_model"]
    assert {"python", "torch", "triton", "cuda", "tuner"} <= set(sw) and sw["torch"] == torch.__version__
    assert "torch" in p.describe()


def test_key_stable_across_calls_and_rebuilt_from_parts() -> None:
    p = current_platform()
    assert current_platform() is p
    assert platform_from_parts(p.device, dict(p.hardware), dict(p.software)) == p
    assert platform_from_parts("cpu", {"cores": 2, "threads": 1}, {}) == platform_from_parts("cpu", {"threads": "1", "cores": "2"}, {})


def test_thread_count_changes_hardware_key_only() -> None:
    one, two = current_platform(threads=1), current_platform(threads=2)
    assert one.key != two.key and one.hardware_key != two.hardware_key
    assert one.software_key == two.software_key


def test_software_version_changes_software_key_only() -> None:
    p = current_platform()
    other = platform_from_parts(p.device, dict(p.hardware), {**dict(p.software), "torch": "9.9.9"})
    assert other.hardware_key == p.hardware_key and other.software_key != p.software_key and other.key != p.key


def test_key_stable_in_another_process() -> None:
    threads = torch.get_num_threads()
    code = f"from tuner.platform import current_platform; print(current_platform(threads={threads}).key)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.strip() == current_platform(threads=threads).key


def test_cached_call_is_fast() -> None:
    current_platform()
    start = time.perf_counter()
    for _ in range(100):
        current_platform()
    assert (time.perf_counter() - start) / 100 < 0.002


def test_unknown_device_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="choose cpu or cuda"):
        current_platform("mps")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_gpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no CUDA device"):
        current_platform("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_platform_describes_the_gpu() -> None:
    p = current_platform("cuda")
    hw = dict(p.hardware)
    assert isinstance(p, Platform) and p.device == "cuda"
    assert hw["gpu_name"] and int(hw["sm_count"]) > 0 and int(hw["memory_gb"]) > 0
    assert hw["capability"].count(".") == 1
    assert current_platform("cuda:0") is current_platform("cuda")
    assert current_platform("cuda").key != current_platform("cpu").key
