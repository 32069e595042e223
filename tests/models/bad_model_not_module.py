"""Deliberately broken: get_model() returns the class instead of an instance."""
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        return x


def get_model():
    return Net


def get_inputs():
    return (torch.randn(1, 2),)
