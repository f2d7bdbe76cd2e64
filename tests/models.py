"""Tiny models the tests convert (built here, random init, seeded; nothing downloads)."""

import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.body(x))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


class TransformerBlock(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, batch_first=True, dropout=0.0)

    def forward(self, x):
        return self.layer(x)


class TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 6)
        self.b = nn.Linear(4, 6)

    def forward(self, x, y):
        h = torch.relu(self.a(x) + self.b(y))
        return h.sum(dim=-1, keepdim=True), h * 2.0


class MatMul(nn.Module):
    """A plain matmul: analytic FLOPs = 2 * M * K * N."""

    def __init__(self, k=64, n=32):
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n))

    def forward(self, x):
        return x @ self.w


def cnn():
    torch.manual_seed(0)
    return CNN().eval(), (torch.randn(1, 3, 16, 16),)


def mlp():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(2, 20),)


def transformer():
    torch.manual_seed(0)
    return TransformerBlock().eval(), (torch.randn(1, 8, 32),)


def two_io():
    torch.manual_seed(0)
    return TwoInTwoOut().eval(), (torch.randn(1, 8), torch.randn(1, 4))


def matmul():
    torch.manual_seed(0)
    return MatMul().eval(), (torch.randn(16, 64),)


def bare_mlp():
    """Returns only a module: example inputs come from --input."""
    torch.manual_seed(0)
    return MLP().eval()




class CacheStep(nn.Module):
    """Mutates a buffer and an input in place (a KV-cache decode step in miniature): torchax returns the
    mutated values as extra leading outputs unless outputs are picked by the program's output spec."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 4))
        self.proj = nn.Linear(4, 4)

    def forward(self, x, kv):
        self.cache.add_(x)
        kv.mul_(0.5)
        return self.proj(self.cache) + kv, x * 2


def cache_step():
    torch.manual_seed(0)
    return CacheStep().eval(), (torch.randn(2, 4), torch.randn(2, 4))
