"""A BERT-style encoder from `transformers` (BertConfig, random weights, no download).

Shrunk from BERT-base (12 layers, width 768) to 4 layers, width 256, 4 heads, a 4096-token
vocabulary, so that a trial takes seconds on 2 CPU cores; batch 4 of 128 tokens with an
attention mask whose last quarter is padding.
"""
import torch
from torch import nn
from vision_import import allow_import

BATCH = 4
TOKENS = 128
VOCAB = 4096


def get_model() -> nn.Module:
    allow_import()     # transformers imports torchvision when it is installed; see vision_import
    from transformers import BertConfig, BertModel

    config = BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                        vocab_size=VOCAB, max_position_embeddings=TOKENS)
    return BertModel(config, add_pooling_layer=True).eval()


def get_inputs() -> dict[str, torch.Tensor]:
    mask = torch.ones(BATCH, TOKENS, dtype=torch.long)
    mask[:, TOKENS * 3 // 4:] = 0
    return {"input_ids": torch.randint(0, VOCAB, (BATCH, TOKENS)), "attention_mask": mask}
