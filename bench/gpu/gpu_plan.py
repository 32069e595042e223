"""The sections of bench/gpu_check.py: their order, time caps and what each verifies.

Standard library only, so `gpu_check.py --plan` runs anywhere (no torch, no GPU). The order is
the order of value: a run that goes wrong late loses the least. Each section runs in a process of
its own under its cap (`gpu_check.py` stops it there and goes on with the next), so a slow or
hung section cannot starve the rest, and a poisoned CUDA context dies with its section.
"""
from __future__ import annotations

from dataclasses import dataclass

RUN_BUDGET_S = 540.0      # one device run of at most 9 minutes (the device's start-up is outside it)
MARGIN_S = 45.0           # left over for the wheel install, the parent and each section's process start
SMOKE_CAP_SCALE = 3.0     # --smoke: 2 CPU cores compile toy models slower than an H200 compiles real ones


@dataclass(frozen=True)
class Section:
    """One section: `key` for --sections, its module and function under bench/ (called with a
    `gpu_common.Check`), its cap in seconds on a GPU and a line saying what it verifies."""

    key: str
    label: str
    cap_s: float
    module: str
    function: str
    verifies: str


SECTIONS: tuple[Section, ...] = (
    Section("header", "0. versions and platform", 15, "gpu_common", "section_header",
            "the installed wheel (not the source folder) is imported; versions; the platform key"),
    Section("search", "1. model searched + modes", 190, "gpu_search", "section_search",
            "a GPT-2-style model (transformers config, random weights; else the conv net) with DEVICE='cuda' "
            "through `tuner search --executor local`, then its stored config re-measured in a fresh process, "
            "paired and interleaved, against mode=max-autotune and mode=reduce-overhead"),
    Section("clock", "2. trial clock vs do_bench", 50, "gpu_clock", "section_clock",
            "a GPU-bound MLP: the trial's figure against triton.testing.do_bench (within 5%); CudaClock at "
            "N and 2N calls per sample (within 5%); a defaults-against-defaults trial (the noise floor)"),
    Section("bare", "3. bare 'cuda' prepare", 20, "gpu_faults", "section_bare",
            "tuner.measure.prepare on a model file declaring DEVICE='cuda': it runs on cuda:0, the current device"),
    Section("assert", "4. device assert finalist", 50, "gpu_faults", "section_assert",
            "a confirmation whose finalist fires a device-side assert (bench/gpu/device_assert_mlp.py): "
            "recorded as a runtime error, the others confirmed in a fresh process, the verdict not that one"),
    Section("measure", "5. measurement (issue 24)", 35, "gpu_measure", "section_cuda_measure",
            "CudaClock against the wall clock, the model file's GPU, an asynchronous error at the first call, "
            "cudagraph replays gated, the gate under TF32 with freezing, the candidate's own memory"),
    Section("locks", "6. measure lock on one GPU", 12, "gpu_locks", "section_locks_one",
            "two timed sections on cuda:0 take turns"),
    Section("kernels", "7. tuner.autotune compiled", 30, "gpu_compile_kernels", "section_compile",
            "a tuner.autotune kernel in torch.compile(fullgraph=True) in a fresh process: 1 graph, 0 breaks, "
            "the stored config handed to Inductor, 0 benchmarks; against @triton.autotune"),
    Section("harvest", "8. Inductor harvesting", 30, "gpu_harvest", "section_harvest",
            "GEMM choices and Triton tile configs harvested by a max-autotune compile; a second process "
            "compiling from the database benchmarks none of them"),
    Section("matmul", "9. Triton matmul autotune", 30, "gpu_matmul", "section_matmul",
            "a Triton matmul tuned by tuner.autotune against triton.autotune and torch.mm; a second "
            "process launches the stored config without benchmarking"),
    Section("locks2", "10. locks across GPUs", 12, "gpu_locks", "section_locks_across",
            "needs two GPUs: timed sections on different GPUs overlap (one GPU: 'not tested: one GPU')"),
    Section("zygote", "11. zygote without CUDA", 20, "gpu_zygote", "section_zygote",
            "the zygote's imports leave torch.cuda.is_initialized() False and map no CUDA driver library "
            "(libcuda, libnvidia-*), a fork of it then runs a kernel on the GPU, and a real zygote maps none"),
)
BY_KEY = {s.key: s for s in SECTIONS}


def plan_text(*, smoke: bool = False) -> str:
    """Each section, its cap and what it verifies, and the caps' sum against the run's budget."""
    scale = SMOKE_CAP_SCALE if smoke else 1.0
    lines = [f"{'key':<8} {'cap s':>6}  section: what it verifies"]
    for s in SECTIONS:
        lines.append(f"{s.key:<8} {s.cap_s * scale:>6.0f}  {s.label}: {s.verifies}")
    total = sum(s.cap_s for s in SECTIONS) * scale
    lines.append(f"caps sum to {total:.0f} s; the run's budget is {RUN_BUDGET_S:.0f} s "
                 f"({MARGIN_S:.0f} s of it kept for the install and process starts)" + (" (--smoke: caps x3)" if smoke else ""))
    return "\n".join(lines)
