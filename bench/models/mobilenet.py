"""MobileNetV3-Small from torchvision with random weights (no download), batch 1, 3x160x160.

The full network (2.5 M parameters: depthwise convolutions, squeeze-excitation, hardswish);
the images are smaller than ImageNet's so that a trial takes seconds on 2 CPU cores.
"""
import torch
from torch import nn
from vision_import import torchvision

BATCH = 1
SIZE = 160


def get_model() -> nn.Module:
    return torchvision().models.mobilenet_v3_small(weights=None).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, 3, SIZE, SIZE),)
