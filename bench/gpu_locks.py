"""Section l of bench/gpu_check.py: one timed section per GPU at once, one at a time on each GPU.

One process per GPU the machine has takes `tuner.measure.measure_lock("cuda:N")` and holds it for
HOLD_S, and a second process on cuda:0 does the same. The check passes when the sections of
different GPUs overlapped (a multi-GPU node measures one trial per GPU at once) and the two on
cuda:0 did not (a GPU is timed by one trial at a time). Each process also prints its lock's name
and the host cores it was pinned to, so the report shows the split of the cores among the GPUs.
In --smoke (CPU) two stand-in GPUs are lock slots named by hand (`tuner.measure.node_lock.Slot`).
"""
from __future__ import annotations

import json
import subprocess
from typing import Any

HOLD_S = 1.5

PROGRAM = '''
import json, os, sys, time
from tuner.measure.node_lock import Slot, device_slot, hold_for_timing
device = sys.argv[1]
slot = device_slot(device) if device.startswith("cuda") else Slot("gpu-" + device)
with hold_for_timing(slot):
    start = time.time()
    cores = sorted(os.sched_getaffinity(0))
    time.sleep({hold})
    end = time.time()
print(json.dumps({{"device": device, "lock": slot.gpu, "cores": cores, "start": start, "end": end}}))
'''


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def section_locks(check: Any) -> list[str]:
    if check.smoke:
        devices = ["stand-in-0", "stand-in-1", "stand-in-0"]
    else:
        import torch

        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] + ["cuda:0"]
    program = PROGRAM.format(hold=HOLD_S)
    procs = [subprocess.Popen(check.python("-c", program, device), stdout=subprocess.PIPE, text=True,
                              env=check.env, cwd=check.run_dir) for device in devices]
    held = [json.loads(p.communicate(timeout=60 + 2 * HOLD_S * len(devices))[0].strip().splitlines()[-1])
            for p in procs]
    t0 = min(h["start"] for h in held)
    for h in held:
        print(f"  {h['device']:<12} lock {h['lock']}, cores {h['cores'][0]}-{h['cores'][-1]} "
              f"({len(h['cores'])}), held {h['start'] - t0:.2f} s .. {h['end'] - t0:.2f} s")
    first, *others, again = held
    if _overlap(first, again):
        raise AssertionError(f"two timed sections on {first['device']} overlapped")
    apart = [h["device"] for h in others if not _overlap(first, h) and not _overlap(again, h)]
    if apart:
        raise AssertionError(f"{', '.join(apart)} waited for {first['device']}'s timed section")
    return [f"{len(others) + 1} GPU(s): sections of different GPUs overlapped, two on {first['device']} did not"]
