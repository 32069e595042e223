"""Deliberately unusable: forward adds fresh noise on every call (a random op in eval mode)."""
import torch
from torch import nn


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x) + torch.randn_like(x)


def get_model():
    return Noisy().eval()


def get_inputs():
    return (torch.randn(4, 8),)
