"""One pre-norm transformer block: multi-head self-attention plus an MLP, with layer norms.

Sequence 64, model width 128, 4 heads, batch 8.

    tuner search examples/transformer.py
"""
import torch
import torch.nn.functional as F
from torch import nn

BATCH = 8
SEQ = 64
DIM = 128
HEADS = 4


class Block(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def get_model() -> nn.Module:
    return Block().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, SEQ, DIM),)
