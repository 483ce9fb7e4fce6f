"""Train a second sample model: a small MobileNetV3-style network on scikit-learn's digits at 32×32.

    python sample_models/train_digits_mobilenet.py      # ~25 s on one CPU thread, seeded

The 8×8 digits are upsampled bilinearly to 32×32 so that the network can use the structure real edge
models have: a strided stem, inverted-residual blocks with depthwise 3×3 convolutions, squeeze-and-excitation,
Hardswish / Hardsigmoid, residual adds, global average pooling and a linear classifier.

Writes, beside this script (or into the directory given as the first argument):
    digits_mobilenet.pt2   the trained model as a torch.export ExportedProgram (input x: 1×1×32×32)
    digits32_calib.npz     200 training images, inputs only (x: N×1×32×32), for int8 calibration
    digits32_eval.npz      the held-out split (x: N×1×32×32, labels: N) for verification and accuracy
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

HERE = Path(__file__).resolve().parent
SEED = 0
SIZE = 32


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = None) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act is not None else nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Global average pool → 1×1 reduce → ReLU → 1×1 expand → Hardsigmoid, used to rescale the channels."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.gate = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, reduced, 1), nn.ReLU(),
            nn.Conv2d(reduced, channels, 1), nn.Hardsigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(x)


class InvertedResidual(nn.Module):
    """[1×1 expand] → depthwise 3×3 → SE → 1×1 project (linear), with a residual add when shapes match."""

    def __init__(self, cin: int, hidden: int, cout: int, stride: int, act: type[nn.Module]) -> None:
        super().__init__()
        expand = [conv_bn(cin, hidden, 1, act=act)] if hidden != cin else []
        self.block = nn.Sequential(
            *expand,
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=act),
            SqueezeExcite(hidden, max(8, hidden // 4)),
            conv_bn(hidden, cout, 1),
        )
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


class DigitsMobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # Wide enough that weights, not per-channel biases and graph metadata, make up most of the
        # file, as in real MobileNets (~250k parameters).
        self.features = nn.Sequential(
            conv_bn(1, 16, 3, stride=2, act=nn.Hardswish),          # stem: 16×16×16
            InvertedResidual(16, 16, 16, 2, nn.Hardswish),           # depthwise-separable: 16×8×8
            InvertedResidual(16, 72, 32, 1, nn.SiLU),                # 32×8×8
            InvertedResidual(32, 96, 32, 1, nn.SiLU),                # residual
            InvertedResidual(32, 144, 64, 2, nn.Hardswish),          # 64×4×4
            InvertedResidual(64, 192, 64, 1, nn.Hardswish),          # residual
            InvertedResidual(64, 288, 96, 1, nn.Hardswish),          # 96×4×4
            conv_bn(96, 640, 1, act=nn.Hardswish),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(640, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)))


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1], bilinearly upsampled to N×1×32×32 float32; the CNN script's stratified 80/20 split."""
    digits = load_digits()
    x8 = torch.from_numpy(np.array((digits.images / 16.0).astype(np.float32)[:, None, :, :], copy=True, order="C"))
    x32 = nn.functional.interpolate(x8, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    x = np.array(x32.numpy(), dtype=np.float32, copy=True, order="C")
    y = digits.target.astype(np.int64)
    parts = train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y)
    return tuple(np.array(p, copy=True, order="C") for p in parts)  # type: ignore[return-value]


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int = 20) -> nn.Module:
    torch.manual_seed(SEED)
    xt, yt = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    gen = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
        sched.step()
    return model.eval()


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x.copy())).argmax(1).numpy() == y).mean())


def main(out_dir: Path = HERE) -> None:
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    # One intra-op thread: the weights then do not depend on the machine's core count, and a 2-thread
    # run slows several-fold whenever another process holds a core (measured: ~1 s vs ~10 s per epoch).
    torch.set_num_threads(1)
    out_dir.mkdir(parents=True, exist_ok=True)
    x_train, x_eval, y_train, y_eval = digits_split()
    model = train(DigitsMobileNet(), x_train, y_train)
    acc = accuracy(model, x_eval, y_eval)
    n_params = sum(p.numel() for p in model.parameters())
    example = (torch.from_numpy(x_eval[:1].copy()),)
    torch.export.save(torch.export.export(model, example), out_dir / "digits_mobilenet.pt2")
    calib = np.random.default_rng(SEED).choice(len(x_train), 200, replace=False)
    np.savez_compressed(out_dir / "digits32_calib.npz", x=x_train[np.sort(calib)])
    np.savez_compressed(out_dir / "digits32_eval.npz", x=x_eval, labels=y_eval)
    print(f"digits_mobilenet: {n_params} parameters; eval accuracy {acc * 100:.2f}% "
          f"on {len(y_eval)} held-out digits; wrote {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
