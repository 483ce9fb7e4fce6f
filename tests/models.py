"""Small real PyTorch models for tests (import specs such as tests.models:tiny_mlp)."""

from __future__ import annotations

import time

import numpy as np
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


class SlowToExport(nn.Module):
    """A model whose export takes seconds, as a long unrolled recurrence's lowering does: it sleeps while
    torch.export traces it (not when it runs, nor when torch.jit traces it for a .ptl)."""

    EXPORT_SECONDS = 600.0

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            time.sleep(self.EXPORT_SECONDS)
        return self.fc(x)


def tiny_mlp() -> nn.Module:
    return TinyMLP().eval()


def slow_to_export() -> nn.Module:
    return SlowToExport().eval()


def two_inputs() -> nn.Module:
    return TwoInputs().eval()


def unlowerable() -> nn.Module:
    return Unlowerable().eval()


def not_a_model():
    return "just a string"


class OneBadLayer(nn.Module):
    """A small CNN on the 8×8 digits whose layer `conv2` cannot be quantized to int8: channel 7 of
    conv1 is dead (zero weights and bias: always 0), and conv2 gives that channel
    weights of 50, so each output channel's int8 weight scale (per channel, set by its largest
    weight) rounds every other weight of conv2 to zero. Float, the dead channel adds nothing; int8,
    conv2 loses its signal. Every other layer quantizes well, and conv2 holds under a tenth of the
    weights. Only conv1 has a bias: the output is signal, not offsets."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(8, 64, 3, padding=1, bias=False)
        self.fc1 = nn.Linear(64, 128, bias=False)
        self.fc2 = nn.Linear(128, 10, bias=False)
        with torch.no_grad():
            self.conv1.weight[7] = 0.0
            self.conv1.bias[7] = 0.0
            self.conv2.weight[:, 7] = 50.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.fc2(torch.relu(self.fc1(x.mean(dim=(2, 3)))))


def one_bad_layer() -> nn.Module:
    return OneBadLayer().eval()


class NormalizedBlock(nn.Module):
    """A post-LN encoder's pattern on 4 tokens of 16 features: the LayerNorm output feeds two linears and
    the residual add, and two of its channels are 20-30× the rest (as a BERT's are)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.LayerNorm(16)
        self.q = nn.Linear(16, 16)
        self.k = nn.Linear(16, 16)
        with torch.no_grad():
            self.norm.weight[3] = 30.0
            self.norm.weight[11] = -20.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return self.q(h) * self.k(h) + h


def normalized_block() -> nn.Module:
    return NormalizedBlock().eval()


class PreluAfterLinear(nn.Module):
    """The shape of MTCNN's refinement nets on the 8×8 digits: conv → PReLU, then a Linear followed by a
    PReLU on its 2-D output, which ExecuTorch's XNNPACK lowering refuses ("Attempting to convert non-NHWC
    compatible node to NHWC")."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.conv = nn.Conv2d(1, 8, 3)
        self.prelu1 = nn.PReLU(8)
        self.fc = nn.Linear(8 * 6 * 6, 32)
        self.prelu2 = nn.PReLU(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.prelu1(self.conv(x))
        return self.head(self.prelu2(self.fc(x.flatten(1))))


def prelu_after_linear() -> nn.Module:
    return PreluAfterLinear().eval()


class PixelEmbedding(nn.Module):
    """The 8×8 digits as 64 tokens (each pixel's intensity 0-16) through an embedding table, as a text
    encoder reads token ids: at int8 the table is stored per row and looked up by ExecuTorch's quantized
    kernels, outside the XNNPACK delegate."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.embed = nn.Embedding(17, 32)
        self.fc = nn.Linear(32, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embed(tokens).mean(dim=1))


def pixel_embedding() -> nn.Module:
    return PixelEmbedding().eval()


class SpectrumNet(nn.Module):
    """A magnitude spectrum the way a voice-activity net's front end computes it (Silero VAD's STFT):
    a convolution with a windowed DFT basis, real² + imag², square root; then a convolution over the
    spectrum and a linear head. The power between the square and the root spans the square of the
    signal's dynamic range."""

    def __init__(self, n: int = 128, hop: int = 64) -> None:
        super().__init__()
        bins = n // 4 + 1
        t, k = torch.arange(n, dtype=torch.float32), torch.arange(bins, dtype=torch.float32)[:, None]
        window = torch.hann_window(n, periodic=True)
        basis = torch.cat([torch.cos(2 * torch.pi * k * t / n), -torch.sin(2 * torch.pi * k * t / n)]) * window
        self.register_buffer("basis", basis[:, None, :])
        self.bins, self.hop = bins, hop
        torch.manual_seed(5)
        self.conv = nn.Conv1d(bins, 16, 3, padding=1)
        self.fc = nn.Linear(16, 2)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.nn.functional.conv1d(audio, self.basis, stride=self.hop)
        real, imag = spec[:, : self.bins], spec[:, self.bins:]
        magnitude = torch.sqrt(real.pow(2) + imag.pow(2))
        return self.fc(torch.relu(self.conv(magnitude)).mean(dim=-1))


def spectrum_net() -> nn.Module:
    return SpectrumNet().eval()


class LogMelNet(SpectrumNet):
    """SpectrumNet's front end as a wake-word or speech model's is (openWakeWord's melspectrogram.onnx): the
    power (no square root) summed into mel-like bands by a constant matrix, floored, in decibels; then a
    convolution over the bands and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.register_buffer("bands", torch.rand(self.bins, 12) ** 4)
        self.conv = nn.Conv1d(12, 16, 3, padding=1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.nn.functional.conv1d(audio, self.basis, stride=self.hop)
        real, imag = spec[:, : self.bins], spec[:, self.bins:]
        power = torch.matmul((real.pow(2) + imag.pow(2)).transpose(1, 2), self.bands)
        decibels = 10 * torch.log10(torch.clamp(power, min=1e-10)).transpose(1, 2)
        return self.fc(torch.relu(self.conv(decibels)).mean(dim=-1))


def log_mel_net() -> nn.Module:
    return LogMelNet().eval()


class LevelNet(SpectrumNet):
    """A raw-audio classifier whose features follow the clip's level up to a logarithm (Silero VAD's shape: an
    STFT as a convolution, its magnitude, a convolution and ReLU with no normalization; here pooled, in decibels,
    then a linear head): a -50 dB clip's features are 50 dB below a loud clip's through every layer before the
    log, and the log shows them whole."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(8)
        self.conv = nn.Conv1d(self.bins, 16, 3, padding=1, bias=False)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.nn.functional.conv1d(audio, self.basis, stride=self.hop)
        real, imag = spec[:, : self.bins], spec[:, self.bins:]
        features = torch.relu(self.conv(torch.sqrt(real.pow(2) + imag.pow(2)))).mean(dim=-1)
        return self.fc(20 * torch.log10(features + 1e-6))


def level_net() -> nn.Module:
    return LevelNet().eval()


class VadFrontEnd(nn.Module):
    """Silero VAD's front end at its sizes, for measuring the level path's cost: an STFT as a convolution
    (258 × 1 × 256, hop 128), its magnitude, four conv + ReLU (129 → 128 → 64 → 64 → 128, kernel 3) with no
    normalization; then, where Silero has its LSTM, a mean over time, a log and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        n, bins = 256, 129
        t, k = torch.arange(n, dtype=torch.float32), torch.arange(bins, dtype=torch.float32)[:, None]
        basis = torch.cat([torch.cos(2 * torch.pi * k * t / n), -torch.sin(2 * torch.pi * k * t / n)])
        self.register_buffer("basis", (basis * torch.hann_window(n, periodic=True))[:, None, :])
        widths = [bins, 128, 64, 64, 128]
        self.convs = nn.ModuleList(nn.Conv1d(a, b, 3, padding=1) for a, b in zip(widths, widths[1:]))
        self.fc = nn.Linear(128, 2)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.nn.functional.conv1d(audio, self.basis, stride=128)
        x = torch.sqrt(spec[:, :129].pow(2) + spec[:, 129:].pow(2))
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.fc(torch.log(x.mean(-1) + 1e-6))


def vad_front_end() -> nn.Module:
    return VadFrontEnd().eval()


class ScoreHeadNet(nn.Module):
    """A YOLO-style detector in miniature: a SiLU stem whose first conv has one loud channel (the stem's
    range is many times its bulk, as in a real detector's first stages), a body to stride 8, and per
    position 4 box values in pixels beside 4 class probabilities from a Sigmoid, most of them near zero
    (background), a few above 0.25 (detections)."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(), nn.Conv2d(16, 16, 3, 1, 1), nn.SiLU())
        self.body = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.SiLU(), nn.Conv2d(32, 32, 3, 2, 1), nn.SiLU())
        self.cls = nn.Conv2d(32, classes, 1)
        self.box = nn.Conv2d(32, 4, 1)
        with torch.no_grad():
            self.stem[0].weight[0] *= 30
            self.cls.weight *= 150
            self.cls.bias.fill_(-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.body(self.stem(x))
        boxes = torch.relu(self.box(f) + 6).flatten(2) * 16
        return torch.cat([boxes, torch.sigmoid(self.cls(f)).flatten(2)], 1)


def score_head_net() -> nn.Module:
    return ScoreHeadNet().eval()


class RareHighlights(nn.Module):
    """A small CNN on photo crops whose first conv has one channel that sees only highlights: channel 0 is
    200 × (brightness − 0.85), so its range is set by the third of the crops that have near-white pixels
    (the largest of them 30, the mean of the crops' largest 9) while the other channels stay under 1.1, and the
    next conv reads it at a hundredth of its weight. One int8 scale for the tensor, set by the
    brightest crop, leaves the other channels a handful of levels (the class mean-minmax ranges mend)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, 2, 1)
        self.conv3 = nn.Conv2d(16, 16, 3, 2, 1)
        self.head = nn.Linear(16, 10)
        with torch.no_grad():
            self.conv1.weight[0] = 0.0
            self.conv1.weight[0, :, 1, 1] = 200 / 3
            self.conv1.bias[0] = -200 * 0.85
            self.conv2.weight[:, 0] *= 0.01

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))


def rare_highlights() -> nn.Module:
    return RareHighlights().eval()


class ConvSiluConv(nn.Module):
    """conv → SiLU → conv → ReLU on photo crops: ONNX Runtime fuses a QDQ conv into its int8 kernel only
    where a QuantizeLinear follows it directly, and a SiLU (Sigmoid and Mul) after the first leaves it float.
    With `act` hardsigmoid: an activation ONNX Runtime has no int8 kernel for."""

    def __init__(self, act=nn.functional.silu) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(self.act(self.conv1(x))))


class NormAfterActivation(nn.Module):
    """CREPE's block on photo crops: conv → ReLU → BatchNorm → max-pool, three times, then a Linear. A batch norm
    after its activation cannot be folded into the conv: XNNPACK runs it as a 1×1 depthwise conv, which
    XNNPACKQuantizer leaves float — one float "conv" beside each int8 one, at a few hundredths of its work."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        widths = (3, 16, 32, 32)
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(widths, widths[1:]))
        self.norms = nn.ModuleList(nn.BatchNorm2d(b) for b in widths[1:])
        for norm in self.norms:  # trained statistics, not the identity
            norm.running_mean.uniform_(0.0, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.uniform_(-0.2, 0.2)
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, norm in zip(self.convs, self.norms):
            x = nn.functional.max_pool2d(norm(torch.relu(conv(x))), 2)
        return self.head(x.flatten(1))


def norm_after_activation() -> nn.Module:
    return NormAfterActivation().eval()


class EndPosition(nn.Module):
    """A sequence model's pooling at its end token: embeddings of int64 ids, the state at the position an
    arg-max over an int64 mask finds ((ids == 2).long().argmax(1), as g2p-en's reader or a text encoder's pooling
    at its end token). TFLite's ARG_MAX has no int64 input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.emb = nn.Embedding(30, 16)
        self.proj = nn.Linear(16, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.cumsum(self.emb(ids), 1)
        end = (ids == 2).long().argmax(1)
        return self.proj(torch.gather(x, 1, end[:, None, None].expand(-1, 1, x.shape[2]))[:, 0])


def end_position() -> nn.Module:
    return EndPosition().eval()


def conv_silu_conv() -> nn.Module:
    return ConvSiluConv().eval()


def conv_hardsigmoid_conv() -> nn.Module:
    return ConvSiluConv(nn.functional.hardsigmoid).eval()


class ResidualChain(nn.Module):
    """conv → two residual blocks, the second add reading the first (EfficientNet's stages repeat blocks
    so): a backend that finds adds by their torch source function sees none in a re-exported graph."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Conv2d(16, 16, 3, padding=1) for _ in range(2))
        self.head = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def residual_chain() -> nn.Module:
    return ResidualChain().eval()


POWER_BANDS, POWER_FRAMES = 24, 40
_BAND_SCALES = np.geomspace(20, 0.002, POWER_BANDS).astype(np.float32)  # loud low bands, quiet high ones


class PowerLSTM(nn.Module):
    """A speaker-encoder-like recurrence over frames of band power (a spectrogram in linear power, as
    Resemblyzer's LSTM reads): 2 LSTM layers, a linear head on the last step. Its first layer's input
    weights are large on the quiet bands and small on the loud (as training leaves them), and its forget
    gates open (the cell state carries over the frames): one int8 scale per gate row leaves the loud bands'
    weights a few levels, and the cell state integrates their error."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lstm = nn.LSTM(POWER_BANDS, 48, num_layers=2, batch_first=True)
        self.head = nn.Linear(48, 16)
        with torch.no_grad():
            self.lstm.weight_ih_l0.mul_(torch.from_numpy(0.3 / _BAND_SCALES))
            self.lstm.bias_hh_l0[48:96] += 3  # the forget gates

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(frames)
        return self.head(hidden[-1])


def power_lstm() -> nn.Module:
    return PowerLSTM().eval()


def band_powers(n: int, seed: int) -> np.ndarray:
    """n×POWER_FRAMES×POWER_BANDS frames of band power: exponential noise per band at each band's scale,
    each clip at a loudness from -26 dB to 0 dB."""
    rng = np.random.default_rng(seed)
    power = rng.exponential(1.0, (n, POWER_FRAMES, POWER_BANDS)) * _BAND_SCALES * rng.uniform(0.05, 1, (n, 1, 1))
    return power.astype(np.float32)


def photo_crops(n: int, seed: int, size: int = 64) -> np.ndarray:
    """n×3×size×size crops of the photos scikit-image ships, scaled to 0..1."""
    from skimage import data

    rng = np.random.default_rng(seed)
    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    crops = []
    for i in range(n):
        im = photos[i % len(photos)]
        y, x = rng.integers(0, im.shape[0] - size), rng.integers(0, im.shape[1] - size)
        crops.append(np.transpose(im[y:y + size, x:x + size] / 255.0, (2, 0, 1)))
    return np.asarray(crops, np.float32)


def tones(n: int, seed: int, length: int = 1024, rate: int = 16000) -> np.ndarray:
    """n×1×length clips of audio made by rule: two to four harmonic tones with a vibrato, at loudness
    from -50 dB to 0 dB, over a noise floor 60 dB down (SpectrumNet's inputs)."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / rate
    clips = []
    for _ in range(n):
        f0 = rng.uniform(90, 400)
        clip = sum(rng.uniform(0.2, 1.0) / h * np.sin(2 * np.pi * f0 * h * t + 3 * np.sin(2 * np.pi * 5 * t))
                   for h in range(1, int(rng.integers(2, 5)) + 1))
        clip = clip / np.max(np.abs(clip)) * 10 ** (rng.uniform(-50, 0) / 20) + rng.normal(0, 1e-3, length)
        clips.append(clip[None].astype(np.float32))
    return np.stack(clips)
