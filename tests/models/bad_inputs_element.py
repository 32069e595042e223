"""Deliberately broken: element 1 of get_inputs() is an int."""
import torch


def get_model():
    return torch.nn.Linear(2, 2)


def get_inputs():
    return (torch.randn(1, 2), 3)
