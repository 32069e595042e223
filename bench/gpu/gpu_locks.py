"""Sections 6 and 10 of bench/gpu_check.py: one timed section at a time on a GPU, one per GPU at once.

Section 6: two processes take cuda:0's measure lock (`tuner.measure.node_lock`) and hold it for
HOLD_S: they must take turns (a GPU is timed by one trial at a time). Section 10 needs two GPUs
(on one it says "not tested: one GPU"): one process per GPU and a second one on cuda:0; the
sections of different GPUs must overlap (a multi-GPU node measures one trial per GPU at once). Each process also prints its lock's name
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
print("ready", flush=True)
sys.stdin.readline()        # all start together: imports take seconds on a loaded host
with hold_for_timing(slot):
    start = time.time()
    cores = sorted(os.sched_getaffinity(0))
    time.sleep({hold})
    end = time.time()
print(json.dumps({{"device": device, "lock": slot.gpu, "cores": cores, "start": start, "end": end}}))
'''


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def _hold_all(check: Any, devices: list[str]) -> list[dict[str, Any]]:
    """Each of `devices` in a process of its own, released at once when all have imported, holding
    its GPU's lock."""
    program = PROGRAM.format(hold=HOLD_S)
    procs = [subprocess.Popen(check.python("-c", program, device), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=check.env, cwd=check.run_dir)
             for device in devices]
    for p in procs:         # each has imported and named its lock: release them at once
        if p.stdout.readline().strip() != "ready":
            raise AssertionError(f"a lock holder exited before it was ready (exit {p.wait(timeout=60)})")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    held = [json.loads(p.communicate(timeout=60 + 2 * HOLD_S * len(devices))[0].strip().splitlines()[-1])
            for p in procs]
    t0 = min(h["start"] for h in held)
    for h in held:
        print(f"  {h['device']:<12} lock {h['lock']}, cores {h['cores'][0]}-{h['cores'][-1]} "
              f"({len(h['cores'])}), held {h['start'] - t0:.2f} s .. {h['end'] - t0:.2f} s")
    return held


def section_locks_one(check: Any) -> list[str]:
    """Two timed sections on one GPU (cuda:0; in --smoke a stand-in slot) take turns."""
    device = "stand-in-0" if check.smoke else "cuda:0"
    first, again = _hold_all(check, [device, device])
    if _overlap(first, again):
        raise AssertionError(f"two timed sections on {device} overlapped")
    return [f"two timed sections on {device} took turns"]


def section_locks_across(check: Any) -> list[str]:
    """One timed section per GPU at once (needs two GPUs; in --smoke two stand-in slots), while a
    second one on the first GPU waits its turn."""
    from gpu_common import NotTested

    if check.smoke:
        devices = ["stand-in-0", "stand-in-1", "stand-in-0"]
    else:
        import torch

        count = torch.cuda.device_count()
        if count < 2:
            raise NotTested(f"one GPU ({count} visible): sections on different GPUs cannot be overlapped")
        devices = [f"cuda:{i}" for i in range(count)] + ["cuda:0"]
    first, *others, again = _hold_all(check, devices)
    if _overlap(first, again):
        raise AssertionError(f"two timed sections on {first['device']} overlapped")
    apart = [h["device"] for h in others if not _overlap(first, h) and not _overlap(again, h)]
    if apart:
        raise AssertionError(f"{', '.join(apart)} waited for {first['device']}'s timed section")
    return [f"{len(others) + 1} GPU(s): sections of different GPUs overlapped, two on {first['device']} did not"]
