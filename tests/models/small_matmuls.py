"""A few small matmuls: faster uncompiled than compiled on CPU, where a compiled call's guards
and wrapper cost more than the work (about 5 us eager against 15-30 us compiled here)."""
import torch
from torch import nn


class SmallMatmuls(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return (x @ self.a) @ self.b


def get_model():
    return SmallMatmuls().eval()


def get_inputs():
    return (torch.randn(2, 4),)
