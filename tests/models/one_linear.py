"""One linear layer: with freezing and max_autotune, Inductor autotunes exactly one GEMM on CPU."""
import torch
from torch import nn


def get_model():
    return nn.Linear(32, 48).eval()


def get_inputs():
    return (torch.randn(8, 32),)
