"""Deliberately unusable: eager output holds NaN (log of negative inputs), which any
compiled NaN would match."""
import torch
from torch import nn


class LogLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.log(self.lin(x))


def get_model():
    return LogLinear().eval()


def get_inputs():
    return (torch.randn(8, 4),)
