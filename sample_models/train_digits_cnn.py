"""Train the bundled sample model: a small CNN on scikit-learn's real 8×8 handwritten digits.

    python sample_models/train_digits_cnn.py      # ~10 s on 2 CPU cores, seeded

Writes, beside this script:
    digits_cnn.pt2       the trained model as a torch.export ExportedProgram (input x: 1×1×8×8)
    digits_calib.npz     200 training images, inputs only (x: N×1×8×8), for int8 calibration
    digits_eval.npz      the held-out split (x: N×1×8×8, labels: N) for verification and accuracy
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


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1] as N×1×8×8 float32; a stratified 80/20 split, seeded."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :].copy()
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y)


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int = 40) -> nn.Module:
    torch.manual_seed(SEED)
    xt, yt = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    return model.eval()


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x.copy())).argmax(1).numpy() == y).mean())


def main(out_dir: Path = HERE) -> None:
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    x_train, x_eval, y_train, y_eval = digits_split()
    model = train(DigitsCNN(), x_train, y_train)
    acc = accuracy(model, x_eval, y_eval)
    example = (torch.from_numpy(x_eval[:1].copy()),)
    torch.export.save(torch.export.export(model, example), out_dir / "digits_cnn.pt2")
    calib = np.random.default_rng(SEED).choice(len(x_train), 200, replace=False)
    np.savez_compressed(out_dir / "digits_calib.npz", x=x_train[np.sort(calib)])
    np.savez_compressed(out_dir / "digits_eval.npz", x=x_eval, labels=y_eval)
    print(f"digits_cnn: eval accuracy {acc * 100:.2f}% on {len(y_eval)} held-out digits; wrote {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
