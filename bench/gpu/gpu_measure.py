"""Section 5 of bench/gpu_check.py: what issue 24 changed in measurement, on the real device.

  e1. the clock: a launch-bound model timed by `tuner.trial.timing.CudaClock` (host waits after the
      L2 flush, events around back-to-back calls) against the wall clock over back-to-back
      synchronised calls, and against the old protocol (one call per event pair, no wait after
      the flush), which hid host work; the flush buffer's size against the L2 cache;
  e2. the device: a model file on the machine's last GPU; the process's current device, and
      which GPUs hold its memory (one GPU: cuda:0 only);
  e3. an asynchronous error (a device-side assert) raised at the first call's synchronisation,
      in a subprocess (it poisons the CUDA context);
  e4. cudagraphs: a `triton.cudagraphs` compile passes the gate on its replays;
  e5. the gate with cuDNN's default TF32: a conv + batch-norm net with freezing (BN folded into
      the conv weights) is not rejected; eager's error against fp64 is printed;
  e6. the candidate's own peak memory (`tuner.measure.device.call_peak_mb`).
In --smoke (CPU) the CUDA-only parts print "skipped on CPU" and e5/e6 run on CPU.
"""
from __future__ import annotations

import subprocess
import sys
from typing import Any

MLP = '''import torch
from torch import nn
DEVICE = {device!r}
def get_model():
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
def get_inputs():
    return (torch.randn(8, 64),)
'''
CONV = '''import torch
from torch import nn
DEVICE = {device!r}
def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
def get_model():
    net = nn.Sequential(block(3, 32), block(32, 64), block(64, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(64, 10)).eval()
    with torch.no_grad():           # batch-norm statistics that are not the identity, so folding changes bits
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5); m.running_var.uniform_(0.5, 2.0)
    return net
def get_inputs():
    return (torch.randn({batch}, 3, 32, 32),)
'''
ASSERT = '''import sys, torch
from tuner.measure.device import checked_calls, device_sync
dev = sys.argv[1]
x = torch.zeros(4, device=dev)
def call():
    return [x[torch.tensor([10], device=dev)]]      # out of range: a device-side assert, raised asynchronously
try:
    checked_calls(call, device_sync(dev), 1)
    print("NOT RAISED")
except RuntimeError as exc:
    print("RAISED AT THE FIRST CALL: " + str(exc).strip().splitlines()[0][:120])
'''


def section_cuda_measure(check: Any) -> list[str]:
    import torch

    figures: list[str] = []
    problems: list[str] = []
    gpus = torch.cuda.device_count() if not check.smoke else 0
    device = f"cuda:{gpus - 1}" if gpus else "cpu"
    mlp = check.run_dir / "e_mlp.py"
    mlp.write_text(MLP.format(device=device))
    conv = check.run_dir / "e_conv.py"
    conv.write_text(CONV.format(device=device, batch=2 if check.smoke else 32))
    for part in (_clock, _device, _async_error, _cudagraphs, _tf32_and_memory):
        try:
            figures += part(check, device, mlp, conv)
        except Exception as exc:  # noqa: BLE001 - one failed part must not lose the others
            problems.append(f"{part.__name__}: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
            print(f"  {problems[-1]}")
    if problems:
        raise RuntimeError("; ".join(problems))
    return figures


def _runner(path: Any, params: tuple) -> Any:
    from tuner.measure import Rejected, prepare
    from tuner.trial import MeasureSpec

    runner = prepare(MeasureSpec(str(path)), params)
    if isinstance(runner, Rejected):
        raise AssertionError(f"{dict(params)} rejected: {runner.headline}")
    return runner


def _clock(check: Any, device: str, mlp: Any, conv: Any) -> list[str]:
    if check.smoke:
        print("  e1 clock: skipped on CPU (no CUDA events)")
        return []
    import torch

    from tuner.trial import calibrate, median_and_iqr, time_samples, torch_cuda
    from tuner.trial.timing import CudaClock, min_sample_s

    runner = _runner(mlp, ())
    with torch.no_grad():
        calls = calibrate(runner.call, warmup=10, sync=runner.sync, min_sample_s=min_sample_s(device))
        clock = CudaClock(device)
        ours, _ = median_and_iqr(clock.samples(runner.call, calls=calls, samples=15))
        wall, _ = median_and_iqr(time_samples(runner.call, calls=calls, samples=15, sync=runner.sync))
        old = []
        for _ in range(15 * 20):                # the protocol before: flush, start, one call, end; no wait
            clock.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); runner.call(); end.record()
            old.append((start, end))
        torch.cuda.synchronize(device)
        old_ms, _ = median_and_iqr([s.elapsed_time(e) for s, e in old])
    l2 = torch_cuda().l2_cache_bytes(device)
    print(f"  e1 clock: {calls} calls per event pair; CudaClock {ours * 1000:.1f} us/call, wall clock "
          f"{wall * 1000:.1f} us/call, old protocol {old_ms * 1000:.1f} us/call; flush buffer "
          f"{clock.flush.numel() * 4 / 2**20:.0f} MiB for an L2 of {l2 / 2**20:.0f} MiB")
    if abs(ours / wall - 1) > 0.15:
        raise AssertionError(f"CudaClock {ours:.4f} ms against the wall clock {wall:.4f} ms: host work missing?")
    return [f"clock us/call: events {ours * 1000:.1f}, wall {wall * 1000:.1f}, old {old_ms * 1000:.1f} ({calls} calls/pair)"]


def _device(check: Any, device: str, mlp: Any, conv: Any) -> list[str]:
    import torch

    before = [torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count())] if not check.smoke else []
    runner = _runner(mlp, ())
    if check.smoke:
        print(f"  e2 device: {runner.device} (CPU: nothing to select)")
        return []
    current = torch.cuda.current_device()
    grew = [i for i in range(torch.cuda.device_count()) if torch.cuda.memory_allocated(i) > before[i]]
    print(f"  e2 device: model file on {device}; current device cuda:{current}; memory grew on {grew} "
          f"({torch.cuda.device_count()} GPU(s))")
    if f"cuda:{current}" != device or grew != [int(device.split(':')[1])]:
        raise AssertionError(f"measured on cuda:{current}, memory on {grew}, the model file says {device}")
    return [f"device {device}: current and memory there only ({torch.cuda.device_count()} GPU(s))"]


def _async_error(check: Any, device: str, mlp: Any, conv: Any) -> list[str]:
    if check.smoke:
        print("  e3 asynchronous error: skipped on CPU")
        return []
    done = subprocess.run([sys.executable, "-P", "-c", ASSERT, device], capture_output=True, text=True, timeout=120,
                          env=check.env, cwd=check.run_dir)
    line = next((ln for ln in done.stdout.splitlines() if "RAISED" in ln), done.stderr[-300:])
    print(f"  e3 asynchronous error: {line}")
    if not line.startswith("RAISED AT THE FIRST CALL"):
        raise AssertionError(f"the device-side assert was not raised at the first call: {line}")
    return ["device-side assert raised at the first call's sync"]


def _cudagraphs(check: Any, device: str, mlp: Any, conv: Any) -> list[str]:
    if check.smoke:
        print("  e4 cudagraphs: skipped on CPU")
        return []
    runner = _runner(conv, (("triton.cudagraphs", True),))
    print(f"  e4 cudagraphs: first call and two replays match eager (note: {runner.note})")
    return ["cudagraphs: replays compared, passed"]


def _tf32_and_memory(check: Any, device: str, mlp: Any, conv: Any) -> list[str]:
    import torch

    from tuner.measure import fp64_reference
    from tuner.measure.device import allocated_bytes, call_peak_mb
    from tuner.workload import flatten_outputs, load_model_file

    loaded = load_model_file(conv)
    with torch.no_grad():
        eager = flatten_outputs(loaded.call())[0].double().cpu()     # fp64_reference is on the host
    wide = fp64_reference(loaded)[0]
    eager_err = float((eager - wide).abs().max() / wide.abs().max())
    del loaded
    baseline = _runner(conv, ())
    since = allocated_bytes(device)
    frozen = _runner(conv, (("freezing", True),))
    with torch.no_grad():
        peak = call_peak_mb(frozen.call, device, resident_since=since)
        base_peak = call_peak_mb(baseline.call, device)
    tf32 = torch.backends.cudnn.allow_tf32
    print(f"  e5 gate: cuDNN allow_tf32={tf32}; eager's max relative error against fp64 {eager_err:.2e}; "
          f"conv+BN with freezing passed (note: {frozen.note})")
    print(f"  e6 memory: the frozen candidate's own {peak:.2f} MiB; one default call adds {base_peak:.2f} MiB")
    return [f"TF32 {tf32}: eager vs fp64 {eager_err:.1e}, freezing passed; candidate peak {peak:.1f} MiB"]
