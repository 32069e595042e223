"""Deliberately broken: get_model() raises."""
import torch


def get_model():
    raise ValueError("hidden size must be even\n(got 3)")


def get_inputs():
    return (torch.randn(1, 2),)
