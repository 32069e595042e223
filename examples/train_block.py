"""Training one pre-norm transformer block with AdamW: `tuner search --mode train`.

PyTorch's own `nn.TransformerEncoderLayer` (width 128, 4 heads, feed-forward 512, no dropout so
that two eager steps agree), sequence 64, batch 8; the loss is the mean squared error against a
random target.

    tuner search examples/train_block.py --mode train
"""
import torch
import torch.nn.functional as F
from torch import nn

BATCH = 8
SEQ = 64
DIM = 128
HEADS = 4


def get_model() -> nn.Module:
    return nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=4 * DIM, dropout=0.0, activation="gelu",
                                      batch_first=True, norm_first=True)


def get_inputs() -> tuple[torch.Tensor, ...]:
    return torch.randn(BATCH, SEQ, DIM), torch.randn(BATCH, SEQ, DIM)


def get_loss(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    x, target = inputs
    return F.mse_loss(model(x, is_causal=True, src_mask=nn.Transformer.generate_square_subsequent_mask(SEQ)),
                      target)


def get_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)
