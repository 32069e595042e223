"""Deliberately broken: get_inputs() returns a bare tensor instead of a tuple."""
import torch


def get_model():
    return torch.nn.Linear(2, 2)


def get_inputs():
    return torch.randn(1, 2)
