"""A GPT-2-style decoder from `transformers` (GPT2Config, random weights, no download).

Shrunk from GPT-2 small (12 layers, width 768) to 4 layers, width 256, 4 heads, a 4096-token
vocabulary, so that a trial takes seconds on 2 CPU cores; batch 4 of 128 tokens, no KV cache.
"""
import torch
from torch import nn
from vision_import import allow_import

BATCH = 4
TOKENS = 128
VOCAB = 4096


def get_model() -> nn.Module:
    allow_import()     # transformers imports torchvision when it is installed; see vision_import
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=TOKENS, vocab_size=VOCAB, use_cache=False)
    return GPT2LMHeadModel(config).eval()


def get_inputs() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, VOCAB, (BATCH, TOKENS))}
