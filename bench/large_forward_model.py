"""The held-out-like forward model of issue 21: a 200k x 2800 fp32 embedding table (2.24 GB, just over
2 GiB, so ONNX needs external data and a 2 GiB protobuf limit is crossed) and a small head.

Random init, built in code: nothing is downloaded. ``EDGEPORT_LARGE_ROWS`` shrinks the table (tests of the
measuring code run it at a few MB; the slow test and bench/large.py at full size).
"""

import os

import torch
from torch import nn

ROWS, DIM, CLASSES, TOKENS = 200_000, 2800, 16, 32


class EmbeddingClassifier(nn.Module):
    def __init__(self, rows: int = ROWS, dim: int = DIM, classes: int = CLASSES):
        super().__init__()
        self.embed = nn.Embedding(rows, dim)
        self.head = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, ids):
        return self.head(self.embed(ids).mean(dim=1))


def rows() -> int:
    return int(os.environ.get("EDGEPORT_LARGE_ROWS", ROWS))


def build():
    torch.manual_seed(0)
    n = rows()
    with torch.no_grad():
        model = EmbeddingClassifier(rows=n).eval()
    return model, (torch.randint(0, n, (1, TOKENS)),)


def fp32_weight_bytes(n: int | None = None) -> int:
    """What every RSS ratio is divided by: the model's fp32 parameter bytes."""
    n = rows() if n is None else n
    return 4 * (n * DIM + DIM * 64 + 64 + 64 * CLASSES + CLASSES)
