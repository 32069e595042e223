"""A small ViT from timm with random weights (no download): ViT-Tiny's width, 4 blocks, 112x112.

`vit_tiny_patch16_224` (width 192, 3 heads, patch 16) shrunk from 12 blocks to 4 and from
224x224 to 112x112 images (49 patches and a class token), batch 4, so that a trial takes
seconds on 2 CPU cores.
"""
import torch
from torch import nn
from vision_import import allow_import

BATCH = 4
SIZE = 112


def get_model() -> nn.Module:
    allow_import()     # timm imports torchvision; see vision_import
    import timm

    return timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=4, img_size=SIZE).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, 3, SIZE, SIZE),)
