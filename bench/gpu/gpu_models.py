"""Model files for bench/gpu_check.py, written into the check's run folder at GPU or --smoke sizes:
a small transformer stack (the harvest section), a GEMM-bound MLP (the clock section) and a conv
net (the search section's model where `transformers` does not import). Each declares the bare
`DEVICE = "cuda"` on the GPU, as users write it."""
from __future__ import annotations

from pathlib import Path

BLOCK_MODEL = '''"""A small transformer stack, written by bench/gpu_check.py."""
import torch
import torch.nn.functional as F
from torch import nn

DEVICE = {device!r}
LAYERS, D, HEADS, SEQ, BATCH = {layers}, {d}, {heads}, {seq}, {batch}
DTYPE = torch.{dtype}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, D))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def get_model():
    return Stack().to(DTYPE).eval()


def get_inputs():
    return (torch.randn(BATCH, SEQ, D, dtype=DTYPE),)
'''

MLP_MODEL = '''"""A GEMM-bound MLP, written by bench/gpu_check.py."""
import torch
from torch import nn

DEVICE = {device!r}
D, BATCH = {d}, {batch}
DTYPE = torch.{dtype}


def get_model():
    return nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)).to(DTYPE).eval()


def get_inputs():
    return (torch.randn(BATCH, D, dtype=DTYPE),)
'''

CONV_MODEL = '''"""A conv net (conv, batch norm, ReLU; a linear head), written by bench/gpu_check.py."""
import torch
from torch import nn

DEVICE = {device!r}
WIDTH, SIZE, BATCH = {width}, {size}, {batch}
DTYPE = torch.{dtype}


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


def get_model():
    return nn.Sequential(block(3, WIDTH), block(WIDTH, 2 * WIDTH), nn.MaxPool2d(2), block(2 * WIDTH, 2 * WIDTH),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * WIDTH, 10)).to(DTYPE).eval()


def get_inputs():
    return (torch.randn(BATCH, 3, SIZE, SIZE, dtype=DTYPE),)
'''

# --smoke -> name -> (template, sizes)
MODELS = {
    False: {"block": (BLOCK_MODEL, dict(device="cuda", layers=4, d=512, heads=8, seq=512, batch=8, dtype="bfloat16")),
            "mlp": (MLP_MODEL, dict(device="cuda", d=4096, batch=4096, dtype="bfloat16")),
            "conv": (CONV_MODEL, dict(device="cuda", width=64, size=64, batch=32, dtype="bfloat16"))},
    True: {"block": (BLOCK_MODEL, dict(device="cpu", layers=1, d=32, heads=2, seq=8, batch=2, dtype="float32")),
           "mlp": (MLP_MODEL, dict(device="cpu", d=32, batch=16, dtype="float32")),
           "conv": (CONV_MODEL, dict(device="cpu", width=4, size=8, batch=2, dtype="float32"))},
}


def write_model(folder: Path, name: str, *, smoke: bool) -> Path:
    """The model file `name` ("block", "mlp" or "conv") in `folder`, written on first use."""
    template, sizes = MODELS[smoke][name]
    path = folder / f"{name}_model.py"
    if not path.exists():
        path.write_text(template.format(**sizes))
    return path
