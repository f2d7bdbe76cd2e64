"""A small transformer text encoder (token ids in, pooled embedding out): the second bundled example."""

import torch
from torch import nn


class TextEncoder(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.randn(1, 128, dim) * 0.02)
        block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.embed(ids) + self.position[:, : ids.shape[1]]
        return self.norm(self.encoder(h)).mean(dim=1)


def build():
    torch.manual_seed(0)
    return TextEncoder().eval(), (torch.randint(0, 1000, (1, 32)),)
