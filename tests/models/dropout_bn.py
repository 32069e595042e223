"""A model whose graph depends on train/eval: dropout and batch norm."""
import torch
from torch import nn


def get_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5)).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 8),)
