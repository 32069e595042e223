"""A small convolutional classifier on 3x32x32 images (CIFAR-sized), batch 16.

Conv, batch norm and ReLU blocks, then pooling and a linear head.

    tuner search examples/convnet.py
"""
import torch
from torch import nn

BATCH = 16


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


def get_model() -> nn.Module:
    return nn.Sequential(
        _block(3, 32),
        nn.MaxPool2d(2),
        _block(32, 64),
        nn.MaxPool2d(2),
        _block(64, 64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, 3, 32, 32),)
