"""Sections 3 and 4 of bench/gpu_check.py: the bare "cuda" device, and a finalist that fires a
device-side assert inside a confirmation (issue 33).

3. `tuner.measure.prepare` on a model file declaring `DEVICE = "cuda"` (eager and the default
   compile): each runs on `cuda:0`, the process's current device, its output checked against
   eager. In --smoke (no CUDA) the same file is refused by the model-file check ("no CUDA device
   is available"): the device went through the product's normal form, and a `cpu` copy prepares.
4. bench/gpu/device_assert_mlp.py confirmed as a search confirms (`tuner.search.verdict.conclude`
   through `confirm_through` on a real `LocalExecutor`) with two finalists, one of which
   (`max_fusion_size=8`) fires a device-side assert at its first call: that finalist must be
   recorded as failed with the assert's message, the others measured side by side in a fresh
   process, and the verdict must not be that finalist. In --smoke the assert is an IndexError.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ASSERT_MODEL = HERE / "device_assert_mlp.py"
ROUNDS = 12
CRASHING, SOUND = "tuned #1", "tuned #2"


def _copy(check: Any, name: str, device: str) -> Path:
    """A copy of the device-assert model file with DEVICE = `device`."""
    source = ASSERT_MODEL.read_text()
    assert '\nDEVICE = "cuda"\n' in source
    path = check.run_dir / name
    path.write_text(source.replace('\nDEVICE = "cuda"\n', f"\nDEVICE = {device!r}\n", 1))
    return path


def section_bare(check: Any) -> list[str]:
    from tuner.errors import ModelFileError
    from tuner.measure import Rejected, prepare
    from tuner.trial import MeasureSpec

    bare = _copy(check, "bare_cuda.py", "cuda")
    if check.smoke:
        try:
            prepare(MeasureSpec(str(bare)), ())
        except ModelFileError as exc:
            print(f"  DEVICE='cuda' on CPU: {exc}")
            if "no CUDA device is available" not in str(exc):
                raise
        else:
            raise AssertionError("DEVICE='cuda' prepared on a machine without CUDA")
        bare = _copy(check, "bare_cpu.py", "cpu")
    import torch

    declared = "cpu" if check.smoke else "cuda"
    figures = []
    for label, params in (("eager", None), ("default compile", ())):
        runner = prepare(MeasureSpec(str(bare)), params)
        if isinstance(runner, Rejected):
            raise AssertionError(f"{label} of the DEVICE='cuda' model file: {runner.status.value}: {runner.headline}")
        current = "cpu" if check.smoke else f"cuda:{torch.cuda.current_device()}"
        print(f"  {label}: runner on {runner.device}, the process's current device {current}")
        if not check.smoke and (runner.device != "cuda:0" or current != "cuda:0"):
            raise AssertionError(f"{label}: DEVICE='cuda' ran on {runner.device} (current {current}), not cuda:0")
        figures.append(f"{label}: DEVICE={declared!r} -> {runner.device}, current {current}")
    return figures


def section_assert(check: Any) -> list[str]:
    from tuner.search.confirmation_retries import confirm_through
    from tuner.search.verdict import Finalist, conclude
    from tuner.trial import DEFAULT, EAGER, Candidate, ConfirmFailed, MeasureSpec, Status
    from tuner.workers import get_executor

    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"    # a cache hit would skip the trace that arms it
    model = _copy(check, "device_assert.py", check.device)
    spec = MeasureSpec(model_path=str(model), repeat=3, timeout_s=max(20.0, check.left() - 5))
    finalists = (Finalist(CRASHING, Candidate.from_dict({"max_fusion_size": 8})),
                 Finalist(SOUND, Candidate.from_dict({"max_fusion_size": 32})))
    executor, runs = get_executor("local", workers=1), []

    def each_process(request: Any) -> Any:      # what each fresh confirmation process was asked to measure
        runs.append(tuple(label for label, _ in request.variants))
        return executor.run_confirmation(request)

    def confirm(request: Any) -> Any:
        confirmed = confirm_through(each_process, request)
        if isinstance(confirmed, ConfirmFailed):
            raise RuntimeError(f"the confirmation failed: {confirmed.status.value}: {confirmed.error}")
        return confirmed

    try:
        verdict = conclude(confirm, spec, finalists, rounds=ROUNDS)
    finally:
        executor.close()
    crashed, selection = verdict.selection.get(CRASHING), verdict.selection
    headline = (crashed.error or "").splitlines()[0][:160] if crashed.error else ""
    print(f"  {CRASHING} (max_fusion_size=8): {crashed.status.value}: {headline}")
    print(f"  each confirmation process measured: {runs}; chosen: {verdict.chosen}")
    problems = []
    if crashed.status not in (Status.RUNTIME_ERROR, Status.CRASHED) or crashed.round_ms:
        problems.append(f"{CRASHING} ended {crashed.status.value} with {len(crashed.round_ms)} rounds")
    expected = "index out of range" if check.smoke else "device-side assert"
    if expected not in (crashed.error or ""):
        problems.append(f"{CRASHING}'s error does not say {expected!r}")
    for label in (EAGER, DEFAULT, SOUND):
        got = selection.get(label)
        if got.status is not Status.OK or len(got.round_ms) != ROUNDS:
            problems.append(f"{label} ended {got.status.value} with {len(got.round_ms)} rounds")
    if len(runs) < 2 or any(CRASHING in run for run in runs[1:]):
        problems.append(f"the confirmation processes measured {runs}: none without {CRASHING}")
    if verdict.chosen == CRASHING:
        problems.append(f"the verdict chose {CRASHING}")
    if problems:
        raise AssertionError("; ".join(problems))
    return [f"{CRASHING}: {crashed.status.value} ({headline[:70]})",
            f"{len(runs)} confirmation processes, the others measured without it in a fresh one; chose {verdict.chosen}"]
