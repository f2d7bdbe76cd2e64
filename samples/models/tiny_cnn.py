"""A small image classifier: the bundled example for `make demo`."""

import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def build():
    torch.manual_seed(0)
    return TinyCNN().eval(), (torch.randn(1, 3, 32, 32),)
