"""The CUDA side of measurement on CPU, through a recorded stand-in for the device
(tests/helpers/cuda_stand_in.py): whole-call timing with host work inside the event pair, calls per
pair calibrated to a millisecond, one flush buffer sized from the L2 cache, every device call
on the model's own GPU, an asynchronous error caught at the first call, and the candidate's
own peak memory. The real device runs these in bench/gpu_check.py (section `measure`)."""
from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from helpers.cuda_stand_in import FakeCuda, launches
from tuner.measure.device import call_peak_mb, checked_calls, device_sync, select
from tuner.trial import RoundPlan, interleaved_rounds
from tuner.trial.cuda_api import flush_buffer
from tuner.trial.timing import CudaClock


def test_the_event_pair_holds_the_host_work_of_a_launch_bound_model() -> None:
    """70 us of host work per call, 5 us of kernel: a user waits 70 us per call. Without the wait
    between the flush and the start event, the flush's own length of host work is hidden."""
    cuda = FakeCuda(l2_bytes=128 * 2**20)
    clock = CudaClock("cuda:0", cuda)
    per_call = clock.samples(launches(cuda, host_us=70.0, device_us=5.0), calls=20, samples=3)
    assert all(0.069 <= ms <= 0.072 for ms in per_call), per_call
    kernel_bound = clock.samples(launches(cuda, host_us=2.0, device_us=40.0), calls=20, samples=3)
    assert all(0.039 <= ms <= 0.042 for ms in kernel_bound), kernel_bound


def test_one_flush_buffer_per_device_twice_the_l2_cache() -> None:
    cuda = FakeCuda(l2_bytes=60 * 2**20)
    first, second = CudaClock("cuda:1", cuda), CudaClock("cuda:1", cuda)
    assert first.flush is second.flush is flush_buffer("cuda:1", cuda)
    assert first.flush.nbytes == 120 * 2**20
    assert [entry for entry in cuda.log if entry[0] == "empty"] == [("empty", "cuda:1")]


class Variant:
    """A CUDA variant whose calls cost real host time (so calibration sees them) and launch on the stand-in."""

    def __init__(self, cuda: FakeCuda, device: str, seconds: float) -> None:
        self.cuda, self.device, self.seconds, self.calls = cuda, device, seconds, 0
        self.sync = device_sync(device, cuda)

    def call(self) -> None:
        self.calls += 1
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        self.cuda.launch(host_us=self.seconds * 1e6, device_us=1.0)


def test_each_event_pair_spans_back_to_back_calls_calibrated_to_a_millisecond() -> None:
    cuda = FakeCuda()
    variants = {"default": Variant(cuda, "cuda:1", 0.0001), "other": Variant(cuda, "cuda:1", 0.0001)}
    plan = RoundPlan(min_rounds=2, max_rounds=2, samples_per_round=1, target_width=None, budget_s=None, warmup=3)
    start_calls = {label: v.calls for label, v in variants.items()}
    rounds = interleaved_rounds(variants, plan, baseline="default", rng=random.Random(0), cuda=cuda)
    records = [i for i, entry in enumerate(cuda.log) if entry[0] == "record"]
    assert len(records) == 2 * 2 * 2               # one pair per sample: 2 variants x 2 rounds
    timed = {label: v.calls - start_calls[label] - plan.warmup for label, v in variants.items()}
    assert all(n >= 2 * 3 for n in timed.values()), timed     # 1 ms / 0.1 ms per call: 10 (a loaded machine: fewer)
    assert all(0.09 <= ms <= 0.2 for ms in rounds["other"]), rounds


class KernelBound(Variant):
    """A variant whose kernels outlast its host work: 20 us of host work reach the device before
    its first kernel starts, once per sample (the GPU is idle at the start event), then the
    kernels run back to back. Its host time per call stands in for calibration (a real clock)."""

    def call(self) -> None:
        self.calls += 1
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        self.cuda.launch(host_us=20.0, device_us=self.seconds * 1e6)


def test_every_variant_spreads_a_samples_fixed_cost_over_as_many_calls() -> None:
    """The 20 us before the first kernel is a fixed cost per sample. Over one count of calls it adds
    the same to every variant's figure, so the difference of two variants is exactly their kernels'
    (200 us); calibrated alone, 10 and 4 calls per pair, it was 203 us."""
    cuda = FakeCuda()
    variants = {"default": KernelBound(cuda, "cuda:0", 0.0003), "fast": KernelBound(cuda, "cuda:0", 0.0001)}
    plan = RoundPlan(min_rounds=3, max_rounds=3, samples_per_round=1, target_width=None, budget_s=None, warmup=3)
    rounds = interleaved_rounds(variants, plan, baseline="default", rng=random.Random(0), cuda=cuda)
    assert variants["default"].calls == variants["fast"].calls
    assert [d - f for d, f in zip(rounds["default"], rounds["fast"])] == pytest.approx([0.2] * 3, abs=1e-9)


def test_every_device_call_names_the_model_files_gpu() -> None:
    cuda = FakeCuda()
    select("cuda:1", cuda)
    sync = device_sync("cuda:1", cuda)
    CudaClock("cuda:1", cuda).samples(launches(cuda, host_us=1.0, device_us=1.0), calls=2, samples=2)
    sync()
    call_peak_mb(lambda: None, "cuda:1", api=cuda)
    assert ("set_device", "cuda:1") in cuda.log
    assert cuda.devices() == {"cuda:1"}, cuda.log
    assert {name for name, _ in cuda.log} >= {"synchronize", "record", "flush", "reset_peak", "max_memory_allocated"}


def test_an_asynchronous_error_raises_at_the_call_that_caused_it() -> None:
    """A kernel's illegal address surfaces at the next synchronisation: the first call waits for
    its device, so the error is raised there (inside prepare's boundary), not in the next variant."""
    queued: list[str] = []

    def call() -> list:
        queued.append("CUDA error: an illegal memory access was encountered")
        return []

    def sync() -> None:
        if queued:
            raise RuntimeError(queued.pop())

    with pytest.raises(RuntimeError, match="illegal memory access"):
        checked_calls(call, sync, 1)


def test_each_call_is_cloned_before_the_next_overwrites_it() -> None:
    """A cudagraph replay returns the same static output buffer, rewritten by the next replay."""
    import torch

    static = torch.zeros(3)
    values = iter([1.0, 2.0, 3.0])

    def replay() -> list:
        static.fill_(next(values))
        return [static]

    outputs, _ = checked_calls(replay, lambda: None, 3)
    assert [float(o[0][0]) for o in outputs] == [1.0, 2.0, 3.0]


def test_the_candidates_peak_is_its_own_on_cuda() -> None:
    """100 MiB of baseline and flush buffer were there before; the candidate keeps 20 MiB of
    weights and one call needs 30 MiB more at its peak: 50 MiB is the candidate's."""
    cuda = FakeCuda()
    cuda.alloc(100 * 2**20)                 # the baseline, loaded and compiled first
    before = cuda.allocated
    cuda.alloc(20 * 2**20)                  # the candidate's weights
    cuda.alloc(200 * 2**20)                 # its compile's autotuning scratch, freed
    cuda.free(200 * 2**20)

    def call() -> None:
        cuda.alloc(30 * 2**20)
        cuda.free(30 * 2**20)

    assert call_peak_mb(call, "cuda:1", resident_since=before, api=cuda) == pytest.approx(50.0)


# ---------------------------------------------------------------- one normal form for a device


@pytest.mark.parametrize(("device", "assigned", "driver", "expected"), [
    ("cuda", None, None, "cuda:0"), ("cuda:0", None, None, "cuda:0"), ("cuda:1", None, None, "cuda:1"),
    ("cuda:2", None, None, "machine has 2 CUDA device(s)"),
    ("cuda", ("1",), None, "cuda:0"), ("cuda:1", ("1",), None, "cuda:0"), ("cuda:3", ("2", "3"), None, "cuda:1"),
    ("cuda:0", ("1",), None, "names the driver's cuda:0, GPU 0 of the node, but Ray gave this trial GPU 1; "
                             "set DEVICE='cuda'"),
    # the driver ran with CUDA_VISIBLE_DEVICES: its cuda:N is the N-th GPU it lists
    ("cuda:0", ("1",), ("1",), "cuda:0"), ("cuda:1", ("2", "3"), ("1", "3"), "cuda:1"),
    ("cuda", ("2",), ("1",), "cuda:0"),
    ("cuda:0", ("0",), ("1",), "names the driver's cuda:0, GPU 1 of the node (the driver's CUDA_VISIBLE_DEVICES=1), "
                               "but Ray gave this trial GPU 0"),
    ("cuda:1", ("1",), ("1",), "names the driver's cuda:1, but the driver sees 1 GPU(s) (its CUDA_VISIBLE_DEVICES=1)"),
])
def test_a_cuda_device_becomes_an_index_this_process_sees(device: str, assigned, driver, expected: str) -> None:
    from tuner.errors import ModelFileError
    from tuner.workload.device import normal_cuda

    if expected.startswith("cuda:"):
        assert normal_cuda(device, count=2, assigned=assigned, driver=driver) == expected
    else:
        with pytest.raises(ModelFileError, match=re.escape(expected)):
            normal_cuda(device, count=2, assigned=assigned, driver=driver)


def test_the_stand_in_refuses_what_torch_refuses() -> None:
    cuda = FakeCuda(device_count=2)
    with pytest.raises(ValueError, match="Expected a torch.device with a specified index"):
        cuda.set_device("cuda")
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        cuda.set_device("cuda:2")
    cuda.set_device("cuda:1")
    assert cuda.log == [("set_device", "cuda:1")]


@pytest.fixture
def cuda_entry_points(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """torch.cuda's own Python functions over stand-ins for the C entry points below them only
    (this CPU build lacks them): two GPUs, and torch._C._cuda_setDevice recorded. Everything
    above, argument checks included, is torch's."""
    import torch

    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: 2, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_setDevice", lambda index: calls.append(("setDevice", index)), raising=False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1)
    monkeypatch.setattr(torch.cuda, "_cached_device_count", None)
    return calls


def test_torch_cuda_adapter_passes_torch_checks_only_in_the_normal_form(cuda_entry_points) -> None:
    from tuner.trial.cuda_api import TorchCuda

    with pytest.raises(ValueError, match="Expected a torch.device with a specified index"):
        TorchCuda().set_device("cuda")                   # what every trial did before the normal form
    TorchCuda().set_device("cuda:1")
    assert cuda_entry_points == [("setDevice", 1)]


def test_a_bare_cuda_device_reaches_torchs_c_entry_point_through_the_product(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DEVICE = "cuda" goes through the product's own path (the model file's check, then select and
    the real TorchCuda) to torch.cuda.set_device, past torch's argument check, and fails only at
    torch._C._cuda_setDevice, which this CPU build lacks (only the device count is stood in)."""
    import torch

    from tuner.workload.device import check_device

    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: 1, raising=False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1)
    monkeypatch.setattr(torch.cuda, "_cached_device_count", None)
    device = check_device(tmp_path / "m.py", "cuda")
    assert device == "cuda:0"
    with pytest.raises(AttributeError, match="has no attribute '_cuda_setDevice'"):
        select(device)
