"""tiny_mlp that notes, in `sys._clocked_mlp`, when its model was built and when it ran eagerly, and
in which dtype: (what, dtype or None, time.monotonic()). So a test can tell whether a trial loaded it
and took its eager references while a timed section held the node, and how often it ran in float64
(tests/measure/test_references.py)."""
import sys
import time

import torch
from torch import nn

if not hasattr(sys, "_clocked_mlp"):
    sys._clocked_mlp = []


class ClockedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        if not torch.compiler.is_compiling():
            sys._clocked_mlp.append(("eager call", x.dtype, time.monotonic()))
        return self.net(x)


def get_model():
    sys._clocked_mlp.append(("get_model", None, time.monotonic()))
    return ClockedMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
