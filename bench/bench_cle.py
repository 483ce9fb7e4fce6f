"""Measurement: would cross-layer equalization (CLE) apply to EfficientNet-Lite0? (Why edgekit has no CLE pass.)

    .venv/bin/python bench/bench_cle.py [--work DIR]

CLE (Nagel et al., "Data-Free Quantization", 2019) rescales each output channel i of a convolution by 1/s_i
and the matching input channel of the next one by s_i, so that both have the same weight range. It is exact
only when the function between them is positively homogeneous (ReLU, identity): relu6(y / s) · s clips at
6·s, not 6. EfficientNet-Lite0, the depthwise net among the real models, has a ReLU6 between every pair.

This folds the BatchNorms into the convolutions, equalizes every expand → depthwise and depthwise → project
pair of the MBConv blocks, and compares the float logits with the original model's on the eval crops:
with ReLU6 kept (what the backends would run), and with ReLU6 replaced by ReLU (what the DFQ paper did to
MobileNetV2), before and after equalization.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench_int8_real import real_models  # beside this script, which Python puts first on the path


def fold(conv, bn):
    """conv ← conv with the (eval-mode) BatchNorm folded in; returns the Identity that replaces bn."""
    import torch

    scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
    conv.weight = torch.nn.Parameter(conv.weight.detach() * scale.reshape(-1, 1, 1, 1))
    conv.bias = torch.nn.Parameter(bn.bias.detach() - bn.running_mean * scale)
    return torch.nn.Identity()


def equalize(first, second, depthwise_second: bool):
    """Equalize the output channels of `first` with the input channels of `second`; returns the scales."""
    import torch

    w1, w2 = first.weight.detach(), second.weight.detach()
    r1 = w1.abs().reshape(w1.shape[0], -1).amax(1)
    per_input = w2 if depthwise_second else w2.transpose(0, 1)
    r2 = per_input.abs().reshape(per_input.shape[0], -1).amax(1)
    s = torch.where((r1 > 0) & (r2 > 0), torch.sqrt(r1 * r2) / r2.clamp(min=1e-12), torch.ones_like(r1))
    first.weight = torch.nn.Parameter(w1 / s.reshape(-1, 1, 1, 1))
    first.bias = torch.nn.Parameter(first.bias.detach() / s)
    second.weight = torch.nn.Parameter(w2 * (s.reshape(-1, 1, 1, 1) if depthwise_second else s.reshape(1, -1, 1, 1)))
    return s


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="build folder for the model (default: temp dir)")
    args = parser.parse_args(argv)
    rm = real_models()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-cle-"))
    m = rm.efficientnet_lite0(work)
    x = torch.from_numpy(np.load(m.eval)["x"].reshape(-1, 3, 224, 224))
    original = rm.load_efficientnet_lite0()

    folded = copy.deepcopy(original)
    net = folded.net
    net._bn0 = fold(net._conv_stem, net._bn0)
    net._bn1 = fold(net._conv_head, net._bn1)
    for block in net._blocks:
        if hasattr(block, "_expand_conv"):
            block._bn0 = fold(block._expand_conv, block._bn0)
        block._bn1 = fold(block._depthwise_conv, block._bn1)
        block._bn2 = fold(block._project_conv, block._bn2)
    equalized = copy.deepcopy(folded)
    scales = []
    for block in equalized.net._blocks:
        if hasattr(block, "_expand_conv"):
            scales.append(equalize(block._expand_conv, block._depthwise_conv, True))
        scales.append(equalize(block._depthwise_conv, block._project_conv, False))
    s = torch.cat(scales)

    def with_relu(model):
        model = copy.deepcopy(model)
        for block in model.net._blocks:
            block._swish = torch.nn.ReLU()
        model.net._swish = torch.nn.ReLU()
        return model

    with torch.no_grad():
        reference = original(x)
        print(f"EfficientNet-Lite0, {len(x)} eval crops; float logits against the original model's\n")
        print(f"CLE scales over {len(s)} channels: min {s.min():.3g}, median {s.median():.3g}, max {s.max():.3g}; "
              f"{(s < 1).float().mean():.0%} below 1 (their ReLU6 would clip at 6·s < 6)\n")
        print(f"{'model':<46} {'cosine':>8} {'top-1 agreement':>16}")
        for name, model in (("BatchNorm folded", folded), ("folded + CLE, ReLU6 kept", equalized),
                            ("folded, ReLU6 → ReLU", with_relu(folded)),
                            ("folded + CLE, ReLU6 → ReLU", with_relu(equalized))):
            out = model(x)
            cosine = torch.nn.functional.cosine_similarity(out, reference, dim=1).mean().item()
            agree = (out.argmax(1) == reference.argmax(1)).float().mean().item()
            print(f"{name:<46} {cosine:>8.4f} {agree:>16.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
