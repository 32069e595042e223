"""tiny_mlp on a device with room for ROOM copies of it: building a model while ROOM are alive in
this process raises CUDA's out-of-memory error, as a large model's next copy does on a GPU (which
this machine has not). One copy in a trial's default compile and one in its candidate's always fit,
as they fit a real large model's trials; a confirmation holding every finalist does not
(tests/measure/test_references.py). The copies alive are counted across loads of this file (each
variant loads it afresh) after a garbage collection, so a variant already freed does not count.
"""
import gc
import sys
import weakref

import torch
from torch import nn

ROOM = 3

if not hasattr(sys, "_crowded_mlp_alive"):
    sys._crowded_mlp_alive = weakref.WeakSet()


class CrowdedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        return self.net(x)


def get_model():
    gc.collect()
    if len(sys._crowded_mlp_alive) >= ROOM:
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                                     f"of {2 * ROOM} GiB, of which 0 bytes is free ({ROOM} copies of this model)")
    model = CrowdedMLP().eval()
    sys._crowded_mlp_alive.add(model)
    return model


def get_inputs():
    return (torch.randn(8, 32),)
