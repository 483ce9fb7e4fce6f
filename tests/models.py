"""Small real PyTorch models for tests (import specs such as tests.models:tiny_mlp)."""

from __future__ import annotations

import torch
from torch import nn


class TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class TwoInputs(nn.Module):
    """Two named inputs of different shapes, two outputs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(6, 4)

    def forward(self, image: torch.Tensor, extra: torch.Tensor):
        pooled = self.conv(image).mean(dim=(2, 3))
        return pooled + self.fc(extra), pooled.sigmoid()


class Unlowerable(nn.Module):
    """Exports with torch.export, but no edge toolchain lowers singular values."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.svdvals(x)


def tiny_mlp() -> nn.Module:
    return TinyMLP().eval()


def two_inputs() -> nn.Module:
    return TwoInputs().eval()


def unlowerable() -> nn.Module:
    return Unlowerable().eval()


def not_a_model():
    return "just a string"
