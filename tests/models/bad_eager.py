"""Deliberately broken: the inputs do not fit the model, so eager mode fails."""
import torch


def get_model():
    return torch.nn.Linear(2, 2)


def get_inputs():
    return (torch.randn(1, 3),)
