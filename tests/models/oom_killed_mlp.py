"""crowded_mlp.py as a CPU runs out of memory: building a model while ROOM copies are alive in this
process gets it killed by SIGKILL, as Linux's out-of-memory killer ends a process (no MemoryError,
nothing to catch). One copy in a trial's default compile and one in its candidate's always fit; a
confirmation holding eager, the default and two finalists does not (tests/search/test_confirm_crash.py).
The copies alive are counted across loads of this file (each variant loads it afresh) after a
garbage collection, so a variant already freed does not count.
"""
import gc
import os
import signal
import sys
import weakref

import torch
from torch import nn

ROOM = 3

if not hasattr(sys, "_oom_killed_mlp_alive"):
    sys._oom_killed_mlp_alive = weakref.WeakSet()


class OomKilledMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        return self.net(x)


def get_model():
    gc.collect()
    if len(sys._oom_killed_mlp_alive) >= ROOM:
        os.kill(os.getpid(), signal.SIGKILL)
    model = OomKilledMLP().eval()
    sys._oom_killed_mlp_alive.add(model)
    return model


def get_inputs():
    return (torch.randn(8, 32),)
