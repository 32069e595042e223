"""A 3-layer MLP, 256 wide, batch 64: the smallest useful thing to tune.

    tuner search examples/mlp.py

Compiles in seconds on a laptop CPU.
"""
import torch
from torch import nn

BATCH = 64
WIDTH = 256


def get_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(WIDTH, WIDTH),
        nn.GELU(),
        nn.Linear(WIDTH, WIDTH),
        nn.GELU(),
        nn.Linear(WIDTH, 10),
    ).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, WIDTH),)
