"""Deliberately unusable: get_model() forgets .eval(), so dropout changes the output on every call."""
import torch
from torch import nn


def get_model():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Dropout(0.5))


def get_inputs():
    return (torch.randn(4, 8),)
