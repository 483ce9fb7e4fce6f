"""Still more zoo families (see zoo.py, zoo_wild.py): source formats and tasks the zoo did not hold, every weight
inside a pip package, read as a file (the packages are not imported: they pull cv2, librosa, nltk...).

    silero_vad_jit   Silero VAD v6 as TorchScript (silero-vad 6.2.3, silero_vad/data/silero_vad.jit: a
                     torch.jit.script archive). The archive's forward(x, sr) picks its 16 kHz or 8 kHz
                     submodule by the Python int sr and keeps its state inside the module; its 16 kHz submodule
                     `_model` has the stateless forward(x, state) → (prob, stateN), and is saved as it is
                     (torch.jit.save of the scripted submodule: its code and weights unchanged) as the source.
                     Inputs x: float32 1×576 (64 context + 512 samples at 16 kHz), state: float32 2×1×128;
                     the samples are silero_vad's (the (chunk, state) pairs the model reaches on recordings).
    tempocnn_cnn     Schreiber & Müller's tempo CNN (tempocnn 0.0.8, tempocnn/models/cnn.h5: a full Keras 2.4.0
                     model, TF backend, written with model.save; the package's default for `tempo -m cnn`),
                     copied as the source: BatchNorm on the input, conv stack with multi-filter "mf_mod" blocks
                     (6 parallel Conv2D 1×k, Concatenate), AveragePooling, Dense ×3 with BatchNorm, softmax over
                     256 tempo classes (30–285 BPM). Input input_2: float32 1×40×256×1 — 40 mel bands (20–5000 Hz,
                     Slaney) × 256 frames of the magnitude STFT (n_fft 1024, hop 512) at 11 025 Hz, windows every
                     128 frames, divided by the recording's maximum (tempocnn.feature.read_features and
                     classifier.max_normalizer, in numpy here). Audio: synthesised music with a drum pattern
                     (kick, snare, hi-hat) and chords at a known tempo.
    oww_embedding    Google's speech_embedding as openWakeWord ships it (openwakeword 0.4.0,
                     resources/models/embedding_model.onnx, tf2onnx 1.9.3 opset 13): 20 Conv2D + LeakyReLU /
                     Max, MaxPool; input input_1: float32 1×76×32×1 (76 frames of openWakeWord's
                     melspectrogram.onnx output / 10 + 2, every 8 frames, as AudioFeatures._get_embeddings does);
                     output: 1×1×1×96 embedding.
    oww_melspec      openWakeWord's audio front end (same wheel, melspectrogram.onnx, exported by PyTorch 1.11):
                     STFT as two Conv1d (real, imaginary), power, mel MatMul, 10·log10 with a top-dB clip
                     (ReduceMax); input input: float32 1×16000 (1 s at 16 kHz in int16 units, as openWakeWord
                     feeds it); output: 1×1×97×32 log-mel frames.
    magika_v3        Google's Magika content-type classifier (magika 1.0.3, magika/models/standard_v3_3/model.onnx,
                     tf2onnx 1.16.1 opset 15): byte tokens → one-hot (Equal/Cast), Conv, attention-like pooling
                     (Tanh, ReduceSum), dense layers, softmax over 214 content types. Input bytes: int32 1×2048 —
                     the first 1024 bytes of a file after its leading whitespace, then its last 1024 bytes
                     before its trailing whitespace, each padded with token 256 (magika's beg/end features of
                     config.min.json: beg_size 1024, end_size 1024, block_size 4096). Samples: real files of
                     the environment (Python sources, compiled modules, shared libraries, JSON, images, ...).
    ddddocr_ocr      ddddocr's "beta" captcha / text recogniser (ddddocr 1.6.1, ddddocr/common.onnx, exported by
                     PyTorch 1.9, opset 12: conv backbone, LSTM, Gemm, CTC over its 8 210 characters, blank first);
                     input input1: float32 1×1×64×W grayscale / 255, height 64 keeping the aspect (W = 192 here:
                     150×50 captchas); output: W/8 × 1 × 8210 logits (T × batch × classes), decoded greedily.
                     Samples: captcha-like renderings of letters and digits (Pillow's bundled font) over noise,
                     lines and photo crops.
    ddddocr_det      ddddocr's click-captcha character detector (common_det.onnx, YOLOX, PyTorch 1.9, opset 11):
                     SiLU convs, Focus-free stem, PAN, decoupled head; input images: float32 1×3×416×416 BGR 0–255,
                     letterboxed with 114 (detection_engine.preproc); output: 1×3549×6 (grid offsets, log sizes,
                     objectness, class) decoded with strides 8/16/32. Samples: characters drawn over photo crops.
    selfie_seg       MediaPipe's selfie (person) segmentation (mediapipe 0.10.14, modules/selfie_segmentation/
                     selfie_segmentation.tflite, general model 256×256: MobileNetV3-like encoder with hard-swish and
                     squeeze-excitation, decoder with bilinear upsampling; 0.25 MB). TFLite is not a format edgekit
                     reads, so the source is that .tflite through tf2onnx (from_tflite, opset 14) with its one
                     MediaPipe custom op, Convolution2DTransposeBias (the last layer: 2×2, stride 2, SAME, 16 → 1
                     channels), written as the ONNX ConvTranspose + bias it is. Input input_1: float32 1×256×256×3
                     RGB in [0, 1] (the range [-1, 1] gives the same masks within 1 % on the photos); output: 1×256×256×1 person
                     probability. Samples: the people of the bundled photos (astronaut, cameraman) at several
                     framings, and photos without people.
    g2p_en_gru       g2p_en's grapheme-to-phoneme seq2seq (g2p_en 2.1.0, g2p_en/checkpoint20.npz: GRU encoder
                     and GRU decoder, 256 units, embeddings 29 letters / 74 phonemes), rebuilt in torch from the
                     package's numpy code (nn.GRU encoder, GRUCell decoder with greedy arg-max feedback unrolled
                     20 steps) and exported with torch.export. Input chars: int64 1×12 (the word's letter ids,
                     then </s>, then <pad>; the encoder's state is read at the </s> step, so padding changes
                     nothing: the GRU is causal); output: 1×20×74 decoder logits. Words are those of
                     real_models.SENTENCES, every other one misspelled (out-of-dictionary words: the ones g2p_en
                     sends to this network).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_models import _paths, _save_exported, _save_npz  # noqa: E402
from zoo_wild import _cached, _cos, _pkg, _typo, _zoo  # noqa: E402


def _copy(src: Path, dst: Path) -> None:
    _zoo()._copy(src, dst)


def _ort(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3     # ddddocr's declared output shape differs from the one it gives: no warnings
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run_each(session, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The session's outputs on every sample of `feeds` (leading sample axis, each fed with a batch axis),
    stacked per output: n × the output's own shape."""
    n = len(next(iter(feeds.values())))
    outs = [session.run(None, {k: v[i:i + 1] for k, v in feeds.items()}) for i in range(n)]
    return [np.stack([o[j] for o in outs]) for j in range(len(outs[0]))]


# ------------------------------------------------------------------------------------ Silero VAD (TorchScript)

def silero_vad_jit(out_dir: Path, n_calib: int = 200, n_eval: int = 100):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "silero_vad_jit", ".pt")
    model = z.ZooModel("silero_vad_jit", source, calib, evalp, "vad", "x=1,576;state=2,1,128",
                       "Silero VAD v6 16 kHz as TorchScript (scripted: STFT-as-conv, conv encoder, LSTM cell), 0.3 M params",
                       "torch", "max_abs", "MIT (silero-vad)",
                       "TorchScript source (torch.jit.script code, not a trace), LSTMCell, Conv1d, Pad; two inputs",
                       task_bar=0.05)
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    scripted = torch.jit.load(str(_pkg("silero_vad", "data", "silero_vad.jit")), map_location="cpu")
    tmp = source.with_name(source.name + ".tmp.pt")
    torch.jit.save(scripted._model, str(tmp))
    os.replace(tmp, source)
    onnx_model = z.silero_vad(out_dir, n_calib, n_eval)   # the same (chunk, state) samples as the .onnx
    for src, dst in ((onnx_model.calib, calib), (onnx_model.eval, evalp)):
        d = np.load(src)
        _save_npz(dst, x=d["input"], state=d["state"])
    return model


def sanity_silero_vad_jit(model) -> None:
    import torch

    z = _zoo()
    net = torch.jit.load(str(model.source), map_location="cpu")
    ev = np.load(model.eval)
    with torch.no_grad():
        got = [net(torch.from_numpy(ev["x"][i:i + 1]), torch.from_numpy(ev["state"][i]))
               for i in range(len(ev["x"]))]
    prob = np.array([float(p.reshape(-1)[0]) for p, _ in got])
    session = _ort(z.silero_onnx_path())   # the state has no batch axis of its own (2×1×128): fed as it is
    ref_prob = np.array([float(np.ravel(session.run(None, {"input": ev["x"][i:i + 1], "state": ev["state"][i]})[0])[0])
                         for i in range(len(ev["x"]))])
    print(f"  {type(net).__name__} (scripted, {sum(p.numel() for p in net.parameters())} params) vs the package's "
          f"silero_vad_openvino_16k.onnx on the {len(prob)} eval (chunk, state) pairs: probability max |diff| "
          f"{np.abs(prob - ref_prob).max():.2e}; decisions > 0.5 agree {np.mean((prob > 0.5) == (ref_prob > 0.5)):.0%}")
    audio, labels = z.vad_recording(101)
    state, context, probs = torch.zeros(2, 1, 128), torch.zeros(1, 64), []
    with torch.no_grad():
        for s in range(0, len(audio) - 512 + 1, 512):
            x = torch.cat([context, torch.from_numpy(audio[s:s + 512])[None]], 1)
            p, state = net(x, state)
            probs.append(float(p.reshape(-1)[0]))
            context = x[:, -64:]
    probs = np.array(probs)
    lab = labels[:len(probs) * 512].reshape(len(probs), 512).mean(1)
    print(f"  recording 101 streamed through the TorchScript module: speech chunks mean prob "
          f"{probs[lab > 0.9].mean():.2f}, non-speech {probs[lab < 0.1].mean():.2f}, chunk accuracy "
          f"{np.mean((probs > 0.5) == (lab > 0.5)):.0%}")


# ------------------------------------------------------------------------------------ tempo CNN (Keras 2 .h5)

TEMPO_SR, TEMPO_NFFT, TEMPO_HOP, TEMPO_MELS, TEMPO_FRAMES, TEMPO_WIN_HOP = 11025, 1024, 512, 40, 256, 128
TEMPO_INPUT = "input_2"


def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax) (htk=False, norm='slaney')."""
    from zoo_wild import _hz_to_mel, _mel_to_hz

    fmax = sr / 2 if fmax is None else fmax
    fft_freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    weights = np.zeros((n_mels, len(fft_freqs)))
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def tempo_features(audio: np.ndarray) -> np.ndarray:
    """tempocnn.feature.read_features(frames=256, hop_length=128) + classifier.max_normalizer on 11 025 Hz audio:
    librosa.feature.melspectrogram(n_fft=1024, hop_length=512, power=1, n_mels=40, fmin=20, fmax=5000; centred,
    zero-padded, periodic Hann) → windows of 256 frames every 128 (the recording zero-padded to 256 frames
    when shorter), divided by the maximum over all the windows → n×40×256×1 float32."""
    from scipy.signal import get_window

    y = np.pad(audio.astype(np.float64), TEMPO_NFFT // 2)
    n = 1 + (len(y) - TEMPO_NFFT) // TEMPO_HOP
    idx = np.arange(TEMPO_NFFT)[None, :] + TEMPO_HOP * np.arange(n)[:, None]
    spec = np.abs(np.fft.rfft(y[idx] * get_window("hann", TEMPO_NFFT, fftbins=True), axis=1))
    mel = (spec @ mel_filterbank(TEMPO_SR, TEMPO_NFFT, TEMPO_MELS, 20.0, 5000.0).T).T   # 40 × frames
    if mel.shape[1] < TEMPO_FRAMES:
        mel = np.pad(mel, ((0, 0), (0, TEMPO_FRAMES - mel.shape[1])))
    starts = range(0, ((mel.shape[1] - TEMPO_FRAMES) // TEMPO_WIN_HOP + 1) * TEMPO_WIN_HOP, TEMPO_WIN_HOP)
    win = np.stack([mel[:, s:s + TEMPO_FRAMES] for s in starts])[..., None]
    m = win.max()
    return (win / m if m != 0 else win).astype(np.float32)


def _drum(kind: str, rng: np.random.Generator, sr: int = TEMPO_SR) -> np.ndarray:
    t = np.arange(int(0.25 * sr)) / sr
    if kind == "kick":
        f = 50 + 90 * np.exp(-t * 30)
        return np.sin(2 * np.pi * np.cumsum(f) / sr) * np.exp(-t * 12)
    noise = rng.standard_normal(len(t))
    if kind == "snare":
        return (0.6 * noise * np.exp(-t * 18) + 0.4 * np.sin(2 * np.pi * 190 * t) * np.exp(-t * 25)) * 0.7
    hat = np.diff(noise, prepend=0) * np.exp(-t * 60)       # high-passed noise, short
    return hat * 0.25


def beat_music(bpm: float, seconds: float, rng: np.random.Generator, drums: bool = True) -> np.ndarray:
    """Music at `bpm` (11 025 Hz): kick on beats 1 and 3, snare on 2 and 4, hi-hat on eighths (some left out),
    a chord per bar (harmonic tones, random key and shape), an optional bass note on the beats; random mix."""
    sr = TEMPO_SR
    n = int(seconds * sr)
    x = np.zeros(n + sr)
    beat = 60.0 / bpm
    swing = rng.uniform(0, 0.08)
    hat_gain, kick_gain, chord_gain = rng.uniform(0.3, 1.0), rng.uniform(0.5, 1.0), rng.uniform(0.3, 1.0)
    k = 0
    while k * beat < seconds:
        t0 = int(k * beat * sr)
        if drums:
            d = _drum("kick" if k % 2 == 0 else "snare", rng)
            x[t0:t0 + len(d)] += d * (kick_gain if k % 2 == 0 else 0.8)
            for e in (0, 1):
                if rng.random() < 0.85:
                    te = int((k + e * (0.5 + swing)) * beat * sr)
                    h = _drum("hat", rng)
                    x[te:te + len(h)] += h * hat_gain
        if k % 4 == 0:                                           # a chord a bar
            root = 220 * 2 ** (int(rng.integers(-9, 4)) / 12)
            shape = [[0, 4, 7], [0, 3, 7], [0, 4, 7, 10]][int(rng.integers(0, 3))]
            dur = min(int(4 * beat * sr), len(x) - t0)
            tt = np.arange(dur) / sr
            env = np.exp(-tt * rng.uniform(0.5, 2.0)) * np.minimum(1, tt / 0.01)
            for s in shape:
                f = root * 2 ** (s / 12)
                x[t0:t0 + dur] += sum(np.sin(2 * np.pi * f * h * tt) / h ** 1.5 for h in range(1, 5)) * env * 0.12 * chord_gain
        k += 1
    x = x[:n]
    return (x / (np.abs(x).max() + 1e-9) * rng.uniform(0.3, 0.9)).astype(np.float32)


def _tempo_samples(n: int, seed: int, bpm_range: tuple[float, float]) -> tuple[np.ndarray, list[float]]:
    rng = np.random.default_rng(seed)
    xs, bpms = [], []
    while len(xs) < n:
        bpm = float(rng.uniform(*bpm_range))
        audio = beat_music(bpm, float(rng.uniform(14, 20)), rng, drums=rng.random() < 0.85)
        if rng.random() < 0.3:                                  # room noise under it
            audio = audio + (rng.standard_normal(len(audio)) * 0.01).astype(np.float32)
        w = tempo_features(audio)
        xs.extend(w)
        bpms.extend([bpm] * len(w))
    return np.stack(xs[:n]), bpms[:n]


def tempocnn_cnn(out_dir: Path, n_calib: int = 48, n_eval: int = 32):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "tempocnn_cnn", ".h5")
    model = z.ZooModel("tempocnn_cnn", source, calib, evalp, "classifier", None,
                       "tempo-CNN (Schreiber & Müller 2018: BN, Conv, multi-filter blocks of 6 parallel 1×k convs, "
                       "Dense ×3), 256 BPM classes, 2.9 M params", "keras", "top1_agreement",
                       "AGPL-3.0 (tempocnn by H. Schreiber)",
                       "Keras 2.4 .h5 full model (legacy HDF5 model_config), BatchNorm on the input, Concatenate, "
                       "AveragePooling2D, Dropout, softmax", task_bar=0.95)
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_pkg("tempocnn", "models", "cnn.h5"), source)
    x, _ = _tempo_samples(n_calib, 701, (60, 200))
    _save_npz(calib, **{TEMPO_INPUT: x})
    x, _ = _tempo_samples(n_eval, 702, (65, 195))
    _save_npz(evalp, **{TEMPO_INPUT: x})
    return model


def _tf_keras_load(path: Path):
    _zoo()._quiet_tf()
    import tf_keras

    return tf_keras.models.load_model(str(path), compile=False)


def sanity_tempocnn_cnn(model) -> None:
    import h5py

    with h5py.File(model.source, "r") as f:
        print(f"  {model.source.name}: keras_version {f.attrs.get('keras_version')}, backend {f.attrs.get('backend')}")
    net = _tf_keras_load(model.source)
    rng = np.random.default_rng(12)
    rows, ok = [], 0
    for bpm in (70, 85, 100, 120, 128, 140, 160, 175):
        p = net.predict(tempo_features(beat_music(bpm, 16.0, rng)), verbose=0).mean(0)
        est = int(p.argmax()) + 30
        ok += abs(est - bpm) <= 0.04 * bpm
        rows.append(f"{bpm}→{est}")
    print(f"  synthesised drum + chord music, true BPM → estimated (tempocnn's argmax + 30): {', '.join(rows)}; "
          f"within 4 %: {ok}/8")
    ev = np.load(model.eval)[TEMPO_INPUT]
    p = net.predict(ev, verbose=0)
    print(f"  eval windows: mean peak probability {p.max(1).mean():.2f}, estimated BPM range "
          f"{int(p.argmax(1).min()) + 30}–{int(p.argmax(1).max()) + 30}")


# ------------------------------------------------------------------------------------ openWakeWord (ONNX)

OWW_SR = 16000


def _oww_model(name: str) -> Path:
    return _pkg("openwakeword", "resources", "models", name)


def oww_mel(session, audio: np.ndarray) -> np.ndarray:
    """AudioFeatures._get_melspectrogram: int16-scaled float audio → frames × 32, then / 10 + 2."""
    x = (np.clip(audio, -1, 1) * 32767).astype(np.int16).astype(np.float32)[None]
    return np.squeeze(session.run(None, {"input": x})[0]) / 10 + 2


def _oww_audio(seconds: float, rng: np.random.Generator, i: int) -> np.ndarray:
    """Half speech (synth_speech over a background), a quarter speech of a fixed speaker, a quarter non-speech."""
    z = _zoo()
    kind = i % 4
    if kind in (0, 1):
        x = z.synth_speech(seconds, rng)
        return x + z.synth_background(["silence", "noise", "hum", "music"][int(rng.integers(0, 4))], seconds, rng) * 0.5
    if kind == 2:
        from zoo_wild import speaker, speaker_utterance

        return speaker_utterance(speaker(int(rng.integers(0, 50))), seconds, rng)
    return z.synth_background(["silence", "noise", "hum", "music"][int(rng.integers(0, 4))], seconds, rng)


def _oww_windows(n: int, seed: int) -> np.ndarray:
    """n×76×32×1 windows of / 10 + 2 log-mel frames (every 8 frames) over 2.5 s recordings."""
    session = _ort(_oww_model("melspectrogram.onnx"))
    rng = np.random.default_rng(seed)
    out, i = [], 0
    while len(out) < n:
        spec = oww_mel(session, _oww_audio(2.5, rng, i))
        i += 1
        picks = list(range(0, spec.shape[0] - 76 + 1, 8))
        for s in sorted(rng.choice(picks, min(4, len(picks)), replace=False)):
            out.append(spec[s:s + 76])
    return np.stack(out[:n])[..., None].astype(np.float32)


def oww_embedding(out_dir: Path, n_calib: int = 96, n_eval: int = 48):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "oww_embedding", ".onnx")
    model = z.ZooModel("oww_embedding", source, calib, evalp, "embedding", "input_1=1,76,32,1",
                       "Google speech_embedding (openWakeWord's copy): 20 Conv2D with LeakyReLU/Max, MaxPool, 96-d, 0.3 M params",
                       "onnx", "cosine", "Apache-2.0 (openwakeword; speech_embedding by Google, Apache-2.0)",
                       "Conv, LeakyRelu, Max (elementwise), MaxPool, Pad; tf2onnx opset 13, dynamic batch",
                       task_bar=0.98)
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_oww_model("embedding_model.onnx"), source)
    _save_npz(calib, input_1=_oww_windows(n_calib, 801))
    _save_npz(evalp, input_1=_oww_windows(n_eval, 802))
    return model


def sanity_oww_embedding(model) -> None:
    z = _zoo()
    mel, emb = _ort(_oww_model("melspectrogram.onnx")), _ort(model.source)
    jarvis = _ort(_oww_model("hey_jarvis_v0.1.onnx"))
    rng = np.random.default_rng(5)

    def embed(audio):
        spec = oww_mel(mel, audio)
        w = np.stack([spec[s:s + 76] for s in range(0, spec.shape[0] - 75, 8)])[..., None].astype(np.float32)
        return _run_each(emb, {"input_1": w})[0].reshape(len(w), 96)

    sp = [embed(z.synth_speech(3.0, rng) + z.synth_background("silence", 3.0, rng)) for _ in range(3)]
    bg = [embed(z.synth_background(k, 3.0, rng)) for k in ("silence", "noise", "hum", "music")]
    mean = lambda e: e.mean(0) / np.linalg.norm(e.mean(0))  # noqa: E731
    s_s = np.mean([_cos(mean(a), mean(b)) for i, a in enumerate(sp) for b in sp[i + 1:]])
    s_b = np.mean([_cos(mean(a), mean(b)) for a in sp for b in bg])
    print(f"  mean embedding of synthetic utterances: cosine between utterances {s_s:.3f}, utterance vs "
          f"non-speech (silence/noise/hum/music) {s_b:.3f}; adjacent windows (80 ms apart) cosine "
          f"{np.mean([_cos(e[i], e[i + 1]) for e in sp for i in range(len(e) - 1)]):.3f}")
    scores = [float(jarvis.run(None, {"x.1": e[None, -16:].astype(np.float32)})[0].ravel()[0]) for e in sp + bg]
    print(f"  the package's hey_jarvis_v0.1.onnx on these embeddings (16 × 96): max score {max(scores):.3f} "
          f"(no one says 'hey Jarvis' here)")
    ev = np.load(model.eval)["input_1"]
    print(f"  eval windows: {len(ev)} × 76 × 32, mel (/10 + 2) mean {ev.mean():.2f}, range {ev.min():.2f}–{ev.max():.2f}")


def _oww_chunks(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([(np.clip(_oww_audio(1.0, rng, i), -1, 1) * 32767).round().astype(np.float32)
                     for i in range(n)])


def oww_melspec(out_dir: Path, n_calib: int = 64, n_eval: int = 32):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "oww_melspec", ".onnx")
    model = z.ZooModel("oww_melspec", source, calib, evalp, "feature-extractor", f"input=1,{OWW_SR}",
                       "log-mel audio front end (STFT as Conv1d real/imag, power, mel MatMul, 10·log10, top-dB clip), "
                       "no learned weights beyond the filter banks", "onnx", "cosine",
                       "Apache-2.0 (openwakeword)", "Conv (STFT), Pow, MatMul, Log, Clip, ReduceMax; opset 13, "
                       "dynamic batch and length", task_bar=0.98)
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_oww_model("melspectrogram.onnx"), source)
    _save_npz(calib, input=_oww_chunks(n_calib, 811))
    _save_npz(evalp, input=_oww_chunks(n_eval, 812))
    return model


def sanity_oww_melspec(model) -> None:
    session = _ort(model.source)
    rng = np.random.default_rng(3)
    sr = OWW_SR
    t = np.arange(sr) / sr
    for f in (300.0, 1000.0, 3000.0):
        x = (0.3 * np.sin(2 * np.pi * f * t) * 32767).astype(np.float32)[None]
        spec = np.squeeze(session.run(None, {"input": x})[0])
        band = int(spec.mean(0).argmax())
        print(f"  {f:.0f} Hz tone: {spec.shape[0]} frames × {spec.shape[1]} bands, loudest band {band}")
    ev = np.load(model.eval)["input"]
    spec = np.squeeze(session.run(None, {"input": ev[:1]})[0])
    print(f"  eval chunk 0 (speech): frames {spec.shape[0]}, log-mel range {spec.min():.1f}–{spec.max():.1f}")
    del rng


# ------------------------------------------------------------------------------------ Magika (ONNX)

MAGIKA_BEG = MAGIKA_END = 1024
MAGIKA_BLOCK, MAGIKA_PAD = 4096, 256


def _magika_dir() -> Path:
    return _pkg("magika", "models", "standard_v3_3", "model.onnx").parent


def magika_labels() -> list[str]:
    import json

    return json.loads((_magika_dir() / "config.min.json").read_text())["target_labels_space"]


def magika_features(data: bytes) -> np.ndarray:
    """magika's beg/end features (config.min.json: beg_size 1024, mid_size 0, end_size 1024, block_size 4096,
    padding_token 256): the first block stripped of leading whitespace, its first 1024 bytes padded at the end;
    the last block stripped of trailing whitespace, its last 1024 bytes padded at the start → int32 2048."""
    beg = data[:MAGIKA_BLOCK].lstrip()[:MAGIKA_BEG]
    end = data[-MAGIKA_BLOCK:].rstrip()[-MAGIKA_END:] if data else b""
    out = np.full(MAGIKA_BEG + MAGIKA_END, MAGIKA_PAD, np.int32)
    out[:len(beg)] = np.frombuffer(beg, np.uint8)
    if end:
        out[MAGIKA_BEG + MAGIKA_END - len(end):] = np.frombuffer(end, np.uint8)
    return out


def magika_files() -> list[Path]:
    """Real files of this environment, by kind, sorted: the packages' own sources, data and binaries."""
    import numpy
    import PIL
    import scipy
    import skimage

    roots = [Path(numpy.__file__).parent, Path(scipy.__file__).parent, Path(skimage.__file__).parent,
             Path(PIL.__file__).parent]
    site = Path(numpy.__file__).parent.parent
    want = {".py", ".pyi", ".json", ".txt", ".md", ".rst", ".csv", ".png", ".jpg", ".gif", ".npy", ".npz", ".so",
            ".pyc", ".c", ".h", ".cpp", ".pxd", ".pyx", ".toml", ".cfg", ".ini", ".html", ".xml", ".yaml", ".svg",
            ".mat", ".wav", ".tif", ".zip", ".gz", ".pem", ".js", ".css", ".sh"}
    files = []
    for root in roots + [site / "certifi", site / "tifffile", site / "pygments"]:
        if root.is_dir():
            files += [p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in want and p.stat().st_size >= 64]
    return sorted(set(files))


def _magika_samples(n: int, split: int) -> tuple[np.ndarray, list[str]]:
    """n files drawn round-robin over extensions (seeded), the calibration and evaluation files disjoint."""
    rng = np.random.default_rng(900 + split)
    by_ext: dict[str, list[Path]] = {}
    for p in magika_files():
        by_ext.setdefault(p.suffix.lower(), []).append(p)
    for ext in by_ext:   # split each kind's files: even positions for calibration, odd for evaluation
        by_ext[ext] = by_ext[ext][split::2]
        rng.shuffle(by_ext[ext])
    xs, names, k = [], [], 0
    exts = sorted(e for e in by_ext if by_ext[e])
    while len(xs) < n:
        ext = exts[k % len(exts)]
        pool = by_ext[ext]
        j = k // len(exts)
        k += 1
        if j < len(pool):
            xs.append(magika_features(pool[j].read_bytes()))
            names.append(pool[j].name)
        if k > 100 * n:
            break
    return np.stack(xs), names


def magika_v3(out_dir: Path, n_calib: int = 128, n_eval: int = 64):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "magika_v3", ".onnx")
    model = z.ZooModel("magika_v3", source, calib, evalp, "classifier", "bytes=1,2048",
                       "Magika standard_v3_3 content-type classifier over raw bytes (one-hot bytes, conv, "
                       "attention-style pooling, dense), 214 types, 0.8 M params", "onnx", "top1_agreement",
                       "Apache-2.0 (magika by Google)",
                       "int32 token input, Equal/Cast one-hot, Conv, Tanh, ReduceSum/ReduceMax, LayerNorm as "
                       "Sqrt/Reciprocal, Softmax; tf2onnx opset 15", task_bar=0.95)
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_pkg("magika", "models", "standard_v3_3", "model.onnx"), source)
    x, _ = _magika_samples(n_calib, 0)
    _save_npz(calib, bytes=x)
    x, _ = _magika_samples(n_eval, 1)
    _save_npz(evalp, bytes=x)
    return model


def sanity_magika_v3(model) -> None:
    session = _ort(model.source)
    labels = magika_labels()
    x, names = _magika_samples(model_eval_count(model), 1)
    p = _run_each(session, {"bytes": x})[0].reshape(len(x), -1)
    top = p.argmax(1)
    expect = {".py": "python", ".pyi": "python", ".json": "json", ".png": "png", ".jpg": "jpeg", ".gif": "gif",
              ".so": "elf", ".c": "c", ".h": "c", ".cpp": "cpp", ".html": "html", ".xml": "xml", ".svg": "svg",
              ".csv": "csv", ".md": "markdown", ".rst": "rst", ".toml": "toml", ".yaml": "yaml", ".js": "javascript",
              ".css": "css", ".sh": "shell", ".zip": "zip", ".gz": "gzip", ".npy": "npy", ".npz": "npz",
              ".pem": "pem", ".ini": "ini", ".wav": "wav", ".tif": "tiff", ".pyc": "pythonbytecode", ".txt": "txt"}
    hits = [(n, labels[t]) for n, t in zip(names, top)]
    known = [(n, l) for n, l in hits if Path(n).suffix.lower() in expect]
    right = sum(expect[Path(n).suffix.lower()] == l for n, l in known)
    print(f"  eval files: predicted type as the extension says for {right}/{len(known)} with a known mapping; "
          f"mean top probability {p.max(1).mean():.2f}")
    print("  e.g. " + ", ".join(f"{n} → {l}" for n, l in hits[:12]))


def model_eval_count(model) -> int:
    from real_models import _npz_count

    return _npz_count(model.eval) or 0


# ------------------------------------------------------------------------------------ ddddocr (ONNX)

DDDD_OCR_SIZE = (192, 64)     # W × H the recogniser sees (150×50 captchas at height 64)
DDDD_DET = 416


def ddddocr_charset() -> list[str]:
    """CHARSET_BETA of ddddocr/charsets.py (read as a literal: the module is plain data), blank "" first."""
    import ast

    tree = ast.parse(_pkg("ddddocr", "charsets.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CHARSET_BETA" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError("CHARSET_BETA not found in ddddocr/charsets.py")


def ctc_greedy(logits: np.ndarray, charset: list[str]) -> str:
    """Greedy CTC over T × C (or T × 1 × C) logits, blank 0, repeats merged (ddddocr's decoding)."""
    idx = logits.reshape(-1, logits.shape[-1]).argmax(-1)
    out, prev = [], -1
    for i in idx:
        if i != prev and i != 0:
            out.append(charset[i] if i < len(charset) else "?")
        prev = int(i)
    return "".join(out)


def captcha(text: str, rng: np.random.Generator, size: tuple[int, int] = (150, 50)):
    """A captcha-like image (PIL RGB): `text` in Pillow's bundled font, each character with its own size, offset,
    rotation and colour, over a plain, noisy or photo background, with a few lines and dots."""
    from PIL import Image, ImageDraw

    z = _zoo()
    w, h = size
    kind = int(rng.integers(0, 3))
    if kind == 0:
        img = Image.new("RGB", size, tuple(int(v) for v in rng.integers(200, 256, 3)))
    elif kind == 1:
        a = rng.integers(170, 256, (h, w, 3)).astype(np.uint8)
        img = Image.fromarray(a)
    else:
        pics = [p for _, p in z.photos()]
        crop = next(z._random_crops(pics, 1, int(rng.integers(1 << 30)), 0.05, 3.0))[0].convert("RGB").resize(size)
        img = Image.fromarray((np.asarray(crop, np.float32) * 0.35 + 255 * 0.65).astype(np.uint8))
    x = int(rng.integers(4, 14))
    step = (w - x - 6) / max(1, len(text))
    for ch in text:
        font = z._font(int(rng.integers(26, 38)))
        glyph = Image.new("RGBA", (48, 56), (0, 0, 0, 0))
        ImageDraw.Draw(glyph).text((6, 2), ch, font=font, fill=tuple(int(v) for v in rng.integers(0, 120, 3)) + (255,))
        glyph = glyph.rotate(float(rng.uniform(-20, 20)), resample=Image.Resampling.BILINEAR)
        img.paste(glyph, (int(x), int(rng.integers(-8, 4))), glyph)
        x += step * rng.uniform(0.9, 1.05)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(0, 4))):
        draw.line([tuple(int(v) for v in rng.integers(0, [w, h])) for _ in range(2)],
                  fill=tuple(int(v) for v in rng.integers(0, 200, 3)), width=int(rng.integers(1, 3)))
    for _ in range(int(rng.integers(0, 60))):
        px, py = int(rng.integers(0, w)), int(rng.integers(0, h))
        draw.point((px, py), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    return img


CAPTCHA_CHARS = "abcdefghijkmnpqrstuvwxyz23456789ABCDEFGHJKLMNPQRSTUVWXYZ"


def captcha_text(rng: np.random.Generator) -> str:
    return "".join(CAPTCHA_CHARS[int(i)] for i in rng.integers(0, len(CAPTCHA_CHARS), int(rng.integers(4, 7))))


def ddddocr_input(img) -> np.ndarray:
    """ocr_engine._preprocess_image for the bundled models: height 64 keeping the aspect (LANCZOS), grayscale,
    / 255 → 1×64×W float32."""
    from PIL import Image

    w = int(img.size[0] * (64 / img.size[1]))
    g = img.resize((w, 64), Image.Resampling.LANCZOS).convert("L")
    return (np.asarray(g, np.float32) / 255.0)[None]


def _captchas(n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    texts = [captcha_text(rng) for _ in range(n)]
    return np.stack([ddddocr_input(captcha(t, rng)) for t in texts]), texts


def ddddocr_ocr(out_dir: Path, n_calib: int = 96, n_eval: int = 48):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "ddddocr_ocr", ".onnx")
    model = z.ZooModel("ddddocr_ocr", source, calib, evalp, "ocr", f"input1=1,1,{DDDD_OCR_SIZE[1]},{DDDD_OCR_SIZE[0]}",
                       "ddddocr beta captcha/text recogniser (CNN backbone with SiLU, LSTM, Gemm, CTC over 8 210 "
                       "characters), 13.5 M params", "onnx", "ctc", "MIT (ddddocr by sml2h3)",
                       "Conv + Sigmoid·Mul (SiLU), LSTM (ONNX op), Gemm, Shape/Gather/ConstantOfShape for the "
                       "LSTM state; output T×1×C declared [1, seqlen]; opset 12", task_bar=0.95)
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_pkg("ddddocr", "common.onnx"), source)
    x, _ = _captchas(n_calib, 1001)
    _save_npz(calib, input1=x)
    x, _ = _captchas(n_eval, 1002)
    _save_npz(evalp, input1=x)
    return model


def sanity_ddddocr_ocr(model) -> None:
    session = _ort(model.source)
    charset = ddddocr_charset()
    x, texts = _captchas(24, 1003)
    outs = _run_each(session, {"input1": x})[0]
    got = [ctc_greedy(o, charset) for o in outs]
    exact = sum(g == t for g, t in zip(got, texts))
    nocase = sum(g.lower() == t.lower() for g, t in zip(got, texts))
    print(f"  charset {len(charset)} entries; output per sample {tuple(outs.shape[1:])}; 24 rendered captchas: "
          f"exact {exact}/24, ignoring case {nocase}/24")
    print("  e.g. " + ", ".join(f"{t!r}→{g!r}" for t, g in list(zip(texts, got))[:8]))


def yolox_decode(out: np.ndarray, size: int = DDDD_DET, score_thr: float = 0.1, nms_thr: float = 0.45) -> list:
    """detection_engine.get_bbox's decoding of one 3549×6 output: grid offsets and strides 8/16/32, scores =
    objectness × class, class-agnostic NMS → [(score, [x0, y0, x1, y1])] in the 416×416 input."""
    out = out.reshape(-1, 6).astype(np.float64).copy()
    grids, strides = [], []
    for s in (8, 16, 32):
        g = size // s
        xv, yv = np.meshgrid(np.arange(g), np.arange(g))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((g * g, 1), s))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    xy = (out[:, :2] + grid) * stride
    wh = np.exp(out[:, 2:4]) * stride
    scores = out[:, 4] * out[:, 5]
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], 1)
    keep_mask = scores > score_thr
    boxes, scores = boxes[keep_mask], scores[keep_mask]
    order = scores.argsort()[::-1]
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        xx1 = np.maximum(boxes[i, 0], boxes[order[1:], 0])
        yy1 = np.maximum(boxes[i, 1], boxes[order[1:], 1])
        xx2 = np.minimum(boxes[i, 2], boxes[order[1:], 2])
        yy2 = np.minimum(boxes[i, 3], boxes[order[1:], 3])
        inter = np.maximum(0, xx2 - xx1 + 1) * np.maximum(0, yy2 - yy1 + 1)
        area = lambda b: (b[..., 2] - b[..., 0] + 1) * (b[..., 3] - b[..., 1] + 1)  # noqa: E731
        ovr = inter / (area(boxes[i]) + area(boxes[order[1:]]) - inter)
        order = order[1:][ovr <= nms_thr]
    return [(float(scores[i]), boxes[i].tolist()) for i in keep]


def click_captcha(rng: np.random.Generator, size: tuple[int, int] = (344, 344)) -> tuple:
    """A click-captcha-like picture: a photo crop with 3–5 large characters (own size, colour, rotation, a light
    outline) at random places; returns (PIL RGB, [boxes x0, y0, x1, y1])."""
    from PIL import Image, ImageDraw

    z = _zoo()
    pics = [p for _, p in z.photos()]
    img = next(z._random_crops(pics, 1, int(rng.integers(1 << 30)), 0.1, 1.5))[0].convert("RGB").resize(size)
    boxes = []
    for _ in range(int(rng.integers(3, 6))):
        ch = CAPTCHA_CHARS[int(rng.integers(0, len(CAPTCHA_CHARS)))]
        fs = int(rng.integers(34, 60))
        font = z._font(fs)
        glyph = Image.new("RGBA", (fs * 2, fs * 2), (0, 0, 0, 0))
        d = ImageDraw.Draw(glyph)
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        d.text((fs // 2, fs // 3), ch, font=font, fill=col + (255,), stroke_width=2,
               stroke_fill=tuple(255 - c for c in col) + (255,))
        glyph = glyph.rotate(float(rng.uniform(-35, 35)), resample=Image.Resampling.BILINEAR)
        bb = glyph.getbbox()
        if bb is None:
            continue
        for _ in range(20):
            x, y = int(rng.integers(0, size[0] - fs * 2)), int(rng.integers(0, size[1] - fs * 2))
            b = [x + bb[0], y + bb[1], x + bb[2], y + bb[3]]
            if all(b[2] < o[0] or b[0] > o[2] or b[3] < o[1] or b[1] > o[3] for o in boxes):
                img.paste(glyph, (x, y), glyph)
                boxes.append(b)
                break
    return img, boxes


def ddddocr_det_input(img) -> tuple[np.ndarray, float]:
    """detection_engine.preproc on the image as cv2.imdecode gives it (BGR): resize by r = min(416/h, 416/w)
    (bilinear), top-left in a 416×416 canvas of 114, CHW float32 0–255."""
    from PIL import Image

    a = np.asarray(img.convert("RGB"))[..., ::-1]
    h, w = a.shape[:2]
    r = min(DDDD_DET / h, DDDD_DET / w)
    rs = np.asarray(Image.fromarray(a).resize((int(w * r), int(h * r)), Image.Resampling.BILINEAR))
    pad = np.full((DDDD_DET, DDDD_DET, 3), 114, np.uint8)
    pad[:rs.shape[0], :rs.shape[1]] = rs
    return pad.transpose(2, 0, 1).astype(np.float32), r


def _click_captchas(n: int, seed: int) -> tuple[np.ndarray, list]:
    rng = np.random.default_rng(seed)
    xs, truth = [], []
    for i in range(n):
        size = (344, 344) if i % 2 == 0 else (int(rng.integers(300, 420)), int(rng.integers(160, 260)))
        img, boxes = click_captcha(rng, size)
        x, r = ddddocr_det_input(img)
        xs.append(x)
        truth.append([[v * r for v in b] for b in boxes])
    return np.stack(xs), truth


def ddddocr_det(out_dir: Path, n_calib: int = 64, n_eval: int = 32):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "ddddocr_det", ".onnx")
    model = z.ZooModel("ddddocr_det", source, calib, evalp, "detector", None,
                       "YOLOX-style character detector (ddddocr click captchas: CSP backbone with SiLU, PAN, decoupled "
                       "head, 1 class), 5 M params", "onnx", "boxes", "MIT (ddddocr by sml2h3)",
                       "Conv + Sigmoid·Mul (SiLU), Slice (Focus), MaxPool (SPP), Resize, Concat; opset 11",
                       task_bar=0.9)
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_pkg("ddddocr", "common_det.onnx"), source)
    x, _ = _click_captchas(n_calib, 1101)
    _save_npz(calib, images=x)
    x, _ = _click_captchas(n_eval, 1102)
    _save_npz(evalp, images=x)
    return model


def _iou(p, q) -> float:
    ix = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    iy = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def box_agreement(ref: np.ndarray, got: np.ndarray) -> float:
    """Share of the source's detections (yolox_decode, score > 0.1 as ddddocr) the artifact reproduces with
    IoU ≥ 0.5, per image over max(#source, #artifact) detections (extra boxes count against it); an image
    where neither detects anything agrees."""
    agreed = []
    for r, o in zip(ref, got):
        want, have = yolox_decode(r), yolox_decode(o)
        hits = sum(any(_iou(b, b2) >= 0.5 for _, b2 in have) for _, b in want)
        agreed.append(1.0 if not want and not have else hits / max(len(want), len(have)))
    return float(np.mean(agreed))


def sanity_ddddocr_det(model) -> None:
    session = _ort(model.source)
    x, truth = _click_captchas(12, 1103)
    outs = _run_each(session, {"images": x})[0]
    found = total = extra = 0
    for o, boxes in zip(outs, truth):
        dets = [b for s, b in yolox_decode(o) if s > 0.5]
        total += len(boxes)
        found += sum(any(_iou(b, d) >= 0.5 for d in dets) for b in boxes)
        extra += sum(not any(_iou(b, d) >= 0.3 for b in boxes) for d in dets)
    print(f"  12 rendered click captchas: {found}/{total} drawn characters detected (score > 0.5, IoU ≥ 0.5), "
          f"{extra} detections on no character")
    from PIL import Image

    blank = ddddocr_det_input(Image.fromarray(_zoo()._photo("coffee")))[0]
    dets = yolox_decode(session.run(None, {"images": blank[None]})[0])
    print(f"  coffee photo (no characters): detections > 0.5: {sum(s > 0.5 for s, _ in dets)}")


# ------------------------------------------------------------------------------------ MediaPipe selfie segmentation

SELFIE_SIZE = 256


def selfie_onnx() -> bytes:
    """mediapipe's selfie_segmentation.tflite through tf2onnx.convert.from_tflite (opset 14), its custom
    TFL_Convolution2DTransposeBias node (input NHWC 1×128×128×16, weights OHWI 1×2×2×16, bias 1, stride 2, SAME)
    replaced by ConvTranspose on the NCHW tensor tf2onnx transposed from, then a Transpose back to NHWC."""
    import onnx
    import tf2onnx
    from onnx import helper, numpy_helper

    _zoo()._quiet_tf()
    tflite = _pkg("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")
    proto, _ = tf2onnx.convert.from_tflite(str(tflite), opset=14)   # HardSwish needs 14
    graph = proto.graph
    (node,) = [n for n in graph.node if n.op_type == "TFL_Convolution2DTransposeBias"]
    (feed,) = [n for n in graph.node if n.output[0] == node.input[0]]
    assert feed.op_type == "Transpose" and list(feed.attribute[0].ints) == [0, 2, 3, 1], feed
    init = {i.name: i for i in graph.initializer}
    w = numpy_helper.to_array(init[node.input[1]])          # O × kh × kw × I
    b = numpy_helper.to_array(init[node.input[2]])
    graph.initializer.extend([numpy_helper.from_array(w.transpose(3, 0, 1, 2).copy(), "segment_w"),
                              numpy_helper.from_array(b.astype(np.float32), "segment_b")])
    deconv = helper.make_node("ConvTranspose", [feed.input[0], "segment_w", "segment_b"], ["segment_nchw"],
                              name="segment_deconv", kernel_shape=list(w.shape[1:3]), strides=[2, 2])
    back = helper.make_node("Transpose", ["segment_nchw"], [node.output[0]], name="segment_nhwc", perm=[0, 2, 3, 1])
    at = list(graph.node).index(node)
    graph.node.remove(node)
    graph.node.remove(feed)
    graph.node.insert(at - 1, back)
    graph.node.insert(at - 1, deconv)
    used = {i for n in graph.node for i in n.input}
    for name in (node.input[1], node.input[2]):
        if name not in used:
            graph.initializer.remove(init[name])
    keep = [(o.domain, o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    del proto.opset_import[:]
    proto.opset_import.extend([helper.make_opsetid(d, v) for d, v in keep])
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def _selfie_samples(n: int, seed: int) -> np.ndarray:
    """n×256×256×3 float32 in [0, 1]: half framings of the people in the photos (the astronaut and the cameraman,
    crops around their faces of 2–5 face widths, jittered, some flipped), half crops of the other photos."""
    from PIL import Image

    z = _zoo()
    rng = np.random.default_rng(seed)
    pics = dict(z.photos())
    others = [a for k, a in pics.items() if k not in ("astronaut", "camera")]
    xs = []
    for i in range(n):
        if i % 2 == 0:
            name, x, y, w, h = z.FACE_BOXES[(i // 2) % len(z.FACE_BOXES)]
            a = pics[name]
            side = max(w, h) * rng.uniform(2.0, 5.0)
            cx = x + w / 2 + rng.uniform(-0.5, 0.5) * w
            cy = y + h / 2 + rng.uniform(0.3, 1.5) * h            # the body below the face
            img = Image.fromarray(a).crop((int(cx - side / 2), int(cy - side / 2), int(cx + side / 2), int(cy + side / 2)))
        else:
            img = next(z._random_crops(others, 1, int(rng.integers(1 << 30)), 0.1, 1.3))[0]
        img = img.convert("RGB").resize((SELFIE_SIZE, SELFIE_SIZE), Image.Resampling.BILINEAR)
        if rng.integers(0, 2):
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        xs.append(np.asarray(img, np.float32) / 255.0)
    return np.stack(xs)


def selfie_seg(out_dir: Path, n_calib: int = 48, n_eval: int = 24):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "selfie_seg", ".onnx")
    model = z.ZooModel("selfie_seg", source, calib, evalp, "segmentation", None,
                       "MediaPipe selfie segmentation (MobileNetV3-like encoder: hard-swish, SE; bilinear-upsampling "
                       "decoder), person mask 256×256, 0.1 M params", "onnx", "mask_iou",
                       "Apache-2.0 (MediaPipe by Google)",
                       "HardSwish, SE (AveragePool, Sigmoid, Mul), Resize (bilinear), ConvTranspose, NHWC I/O with "
                       "Transposes; a .tflite through tf2onnx (opset 14)", task_bar=0.95)
    if _cached(model, n_calib, n_eval):
        return model
    tmp = source.with_name(source.name + ".tmp")
    tmp.write_bytes(selfie_onnx())
    os.replace(tmp, source)
    _save_npz(calib, input_1=_selfie_samples(n_calib, 1301))
    _save_npz(evalp, input_1=_selfie_samples(n_eval, 1302))
    return model


def mask_iou(ref: np.ndarray, got: np.ndarray, threshold: float = 0.5) -> float:
    """Mean over images of the IoU of the masks thresholded at 0.5 (1.0 for an image where both are empty)."""
    out = []
    for r, g in zip(ref, got):
        a, b = r > threshold, g > threshold
        union = (a | b).sum()
        out.append(1.0 if union == 0 else float((a & b).sum() / union))
    return float(np.mean(out))


def sanity_selfie_seg(model) -> None:
    from PIL import Image

    z = _zoo()
    session = _ort(model.source)
    for name in ("astronaut", "camera", "coffee", "chelsea"):
        a = z._photo(name)
        img = Image.fromarray(a).convert("RGB").resize((SELFIE_SIZE, SELFIE_SIZE), Image.Resampling.BILINEAR)
        m = session.run(None, {"input_1": (np.asarray(img, np.float32) / 255.0)[None]})[0][0, ..., 0]
        line = f"  {name:10s}: person share of the picture {float((m > 0.5).mean()):.2f}"
        box = next((b for b in z.FACE_BOXES if b[0] == name), None)
        if box:
            _, x, y, w, h = box
            sx, sy = SELFIE_SIZE / a.shape[1], SELFIE_SIZE / a.shape[0]
            face = m[int(y * sy):int((y + h) * sy), int(x * sx):int((x + w) * sx)]
            line += f"; inside the face box {float((face > 0.5).mean()):.2f}; top-left corner {float((m[:32, :32] > 0.5).mean()):.2f}"
        print(line)
    ev = np.load(model.eval)["input_1"]
    outs = _run_each(session, {"input_1": ev})[0].reshape(len(ev), -1)
    share = (outs > 0.5).mean(1)
    print(f"  eval: person share, framings of people {share[0::2].mean():.2f}, crops of the other photos {share[1::2].mean():.2f} "
          f"(the cat's face and the cup count as foreground, as selfie models tend to: sanity above)")


# ------------------------------------------------------------------------------------ g2p_en (GRU seq2seq)

G2P_LEN, G2P_STEPS = 12, 20
G2P_GRAPHEMES = ["<pad>", "<unk>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz")


def g2p_phonemes() -> list[str]:
    """g2p_en.G2p().phonemes, read from g2p.py's source (importing g2p_en imports nltk and downloads corpora)."""
    import ast

    src = _pkg("g2p_en", "g2p.py").read_text()
    m = re.search(r"self\.phonemes = (\[.*?\]) \+ (\[.*?\])", src, re.S)
    return ast.literal_eval(m.group(1)) + ast.literal_eval(m.group(2))


def g2p_weights() -> dict[str, np.ndarray]:
    with np.load(_pkg("g2p_en", "checkpoint20.npz")) as v:
        return {k: np.asarray(v[k]) for k in v.files}


def build_g2p():
    """g2p_en's predict() as a torch module: nn.GRU encoder over the padded letters (state read at </s>),
    GRUCell decoder from <s> with greedy arg-max feedback for 20 steps; returns logits 1×20×74, a step after
    </s> the one-hot of </s> (predict() stops there: what the decoder reads on past its end is no reading)."""
    import torch
    from torch import nn

    w = {k: torch.from_numpy(v.astype(np.float32)) for k, v in g2p_weights().items()}

    class G2P(nn.Module):
        def __init__(self):
            super().__init__()
            hid = w["enc_w_hh"].shape[1]
            self.enc_emb = nn.Embedding.from_pretrained(w["enc_emb"], freeze=True)
            self.dec_emb = nn.Embedding.from_pretrained(w["dec_emb"], freeze=True)
            self.enc = nn.GRU(w["enc_emb"].shape[1], hid, batch_first=True)
            self.dec = nn.GRUCell(w["dec_emb"].shape[1], hid)
            self.fc = nn.Linear(hid, w["fc_w"].shape[0])
            with torch.no_grad():
                for mine, theirs in ((self.enc.weight_ih_l0, "enc_w_ih"), (self.enc.weight_hh_l0, "enc_w_hh"),
                                     (self.enc.bias_ih_l0, "enc_b_ih"), (self.enc.bias_hh_l0, "enc_b_hh"),
                                     (self.dec.weight_ih, "dec_w_ih"), (self.dec.weight_hh, "dec_w_hh"),
                                     (self.dec.bias_ih, "dec_b_ih"), (self.dec.bias_hh, "dec_b_hh"),
                                     (self.fc.weight, "fc_w"), (self.fc.bias, "fc_b")):
                    mine.copy_(w[theirs])
            self.register_buffer("end", torch.nn.functional.one_hot(torch.tensor(3), w["fc_w"].shape[0]).float())

        def forward(self, chars):
            seq, _ = self.enc(self.enc_emb(chars))                               # 1 × L × 256
            end = (chars == 2).to(torch.int64).argmax(1)                          # the </s> position
            h = torch.gather(seq, 1, end[:, None, None].expand(-1, 1, seq.shape[2]))[:, 0]
            tok = torch.full_like(end, 2)                                         # <s>
            logits, ended = [], torch.zeros_like(h[:, :1])
            for _ in range(G2P_STEPS):
                h = self.dec(self.dec_emb(tok), h)
                out = self.fc(h)
                # predict() stops at </s>: a step after it says </s> again (a one-hot), not what the decoder
                # would read on past the end
                out = out * (1 - ended) + ended * self.end
                logits.append(out)
                tok = out.argmax(-1)
                ended = torch.maximum(ended, (tok == 3).to(h.dtype)[:, None])
            return torch.stack(logits, 1)

    return G2P().eval()


def g2p_encode(words: list[str]) -> np.ndarray:
    out = np.zeros((len(words), G2P_LEN), np.int64)
    for i, word in enumerate(words):
        ids = [G2P_GRAPHEMES.index(c) if c in G2P_GRAPHEMES[3:] else 1 for c in word[:G2P_LEN - 1]] + [2]
        out[i, :len(ids)] = ids
    return out


def g2p_decode(logits: np.ndarray, phonemes: list[str]) -> list[str]:
    """The greedy phoneme sequence of one 20 × 74 logits, up to </s> (index 3), as predict() stops."""
    out = []
    for t in logits.reshape(-1, logits.shape[-1]).argmax(-1):
        if t == 3:
            break
        out.append(phonemes[t] if t < len(phonemes) else "<unk>")
    return out


def g2p_numpy(word: str) -> list[str]:
    """g2p_en.G2p.predict written out in numpy (the package's own code path): the reference."""
    v = {k: a.astype(np.float32) for k, a in g2p_weights().items()}
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731

    def cell(x, h, wi, wh, bi, bh):
        a, b = x @ wi.T + bi, h @ wh.T + bh
        k = a.shape[-1] * 2 // 3
        r, zz = np.split(sig(a[:, :k] + b[:, :k]), 2, -1)
        n = np.tanh(a[:, k:] + r * b[:, k:])
        return (1 - zz) * n + zz * h

    ids = [G2P_GRAPHEMES.index(c) if c in G2P_GRAPHEMES[3:] else 1 for c in word] + [2]
    h = np.zeros((1, v["enc_w_hh"].shape[1]), np.float32)
    for i in ids:
        h = cell(v["enc_emb"][[i]], h, v["enc_w_ih"], v["enc_w_hh"], v["enc_b_ih"], v["enc_b_hh"])
    dec, preds, ph = v["dec_emb"][[2]], [], g2p_phonemes()
    for _ in range(G2P_STEPS):
        h = cell(dec, h, v["dec_w_ih"], v["dec_w_hh"], v["dec_b_ih"], v["dec_b_hh"])
        p = int((h @ v["fc_w"].T + v["fc_b"]).argmax())
        if p == 3:
            break
        preds.append(ph[p])
        dec = v["dec_emb"][[p]]
    return preds


def _g2p_words(n: int, sentences: list[str], exclude: set[str], seed: int) -> list[str]:
    """n lower-case words of 2–11 letters from the sentences (not in `exclude`), every other one misspelled."""
    rng = np.random.default_rng(seed)
    words: list[str] = []
    for s in sentences:
        for w in re.findall(r"[A-Za-z]+", s):
            w = w.lower()
            if 2 <= len(w) <= G2P_LEN - 2 and w not in exclude and w not in words:
                words.append(w)
    pick = [words[i] for i in sorted(rng.choice(len(words), min(n, len(words)), replace=False))]
    out = [(_typo(w, rng) if i % 2 else w) for i, w in enumerate(pick)]
    return [w[:G2P_LEN - 1] for w in out][:n]


def g2p_en_gru(out_dir: Path, n_calib: int = 96, n_eval: int = 48):
    z = _zoo()
    source, calib, evalp = _paths(out_dir, "g2p_en_gru", ".pt2")
    model = z.ZooModel("g2p_en_gru", source, calib, evalp, "seq2seq", None,
                       "g2p_en grapheme-to-phoneme seq2seq (GRU encoder 256, GRUCell decoder 256, greedy), 0.83 M params",
                       "torch", "seq", "Apache-2.0 (g2p_en by K. Park & J. Kim)",
                       "GRU (12 steps), GRUCell ×20 unrolled, Embedding gather on int64 and on the decoder's own "
                       "arg-max, gather at the </s> position", task_bar=0.95,
                       # 20 × 74 logits: a decoder's tokens per step, which their shape alone makes a map
                       output_kind="output_0=sequence")
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    net = build_g2p()
    with torch.no_grad():
        program = torch.export.export(net, (torch.from_numpy(g2p_encode(["example"])),))
    _save_exported(program, source)
    sentences = z.rm.SENTENCES
    cal = _g2p_words(n_calib, sentences[:80], set(), 1201)
    ev = _g2p_words(n_eval, sentences[80:], set(cal), 1202)
    _save_npz(calib, chars=g2p_encode(cal))
    _save_npz(evalp, chars=g2p_encode(ev))
    return model


def _g2p_word_of(ids: np.ndarray) -> str:
    return "".join(G2P_GRAPHEMES[i] for i in ids if i > 2)


def sanity_g2p_en_gru(model) -> None:
    import torch

    program = torch.export.load(model.source).module()
    ph = g2p_phonemes()
    ev = np.load(model.eval)["chars"]
    same = 0
    rows = []
    for i, ids in enumerate(ev):
        with torch.no_grad():
            got = g2p_decode(program(torch.from_numpy(ids[None])).numpy()[0], ph)
        ref = g2p_numpy(_g2p_word_of(ids))
        same += got == ref
        if i < 6:
            rows.append(f"{_g2p_word_of(ids)} → {' '.join(got)}")
    print(f"  exported program vs g2p_en's own numpy predict() (written out) on {len(ev)} eval words: same phonemes "
          f"for {same}/{len(ev)}; phoneme set {len(ph)}")
    print("  " + "; ".join(rows))
    for word in ("edgekit", "quantize", "tensorflow"):
        with torch.no_grad():
            print(f"  {word} → {' '.join(g2p_decode(program(torch.from_numpy(g2p_encode([word]))).numpy()[0], ph))}")


# ------------------------------------------------------------------------------------ reference outputs, tasks

def reference_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The source's outputs on the eval inputs, stacked per output (n × the output's own shape): onnxruntime for an
    .onnx, the exported program for a .pt2."""
    if model.framework == "onnx":
        return _run_each(_ort(model.source), inputs)
    import torch

    program = torch.export.load(model.source).module()
    with torch.no_grad():
        outs = [program(*(torch.from_numpy(v[i:i + 1]) for v in inputs.values()))
                for i in range(len(next(iter(inputs.values()))))]
    outs = [o if isinstance(o, (list, tuple)) else (o,) for o in outs]
    return [np.stack([o[j].numpy() for o in outs]) for j in range(len(outs[0]))]


def task_metric(model, ref: list[np.ndarray], got: list[np.ndarray]) -> tuple[float, str]:
    """(the model's task metric of the artifact's outputs `got` against the source's `ref`, a note)."""
    if model.metric == "ctc":
        charset = ddddocr_charset()
        a = [ctc_greedy(r, charset) for r in ref[0]]
        b = [ctc_greedy(g, charset) for g in got[0].reshape(ref[0].shape)]
        step = float(np.mean(ref[0].argmax(-1) == got[0].reshape(ref[0].shape).argmax(-1)))
        return float(np.mean([x == y for x, y in zip(a, b)])), f"per-step arg-max agreement {step:.4f}"
    if model.metric == "seq":
        ph = g2p_phonemes()
        r, g = ref[0], got[0].reshape(ref[0].shape)
        same = [g2p_decode(x, ph) == g2p_decode(y, ph) for x, y in zip(r, g)]
        first = float(np.mean(r.reshape(len(r), -1, r.shape[-1])[:, 0].argmax(-1)
                              == g.reshape(len(g), -1, g.shape[-1])[:, 0].argmax(-1)))
        return float(np.mean(same)), f"first phoneme agreement {first:.4f}"
    if model.metric == "mask_iou":
        return mask_iou(ref[0], got[0].reshape(ref[0].shape)), ""
    if model.metric == "boxes":
        r, g = ref[0], got[0].reshape(ref[0].shape)
        n_ref = sum(len(yolox_decode(x)) for x in r)
        return box_agreement(r, g), f"source detections {n_ref} over {len(r)} images"
    raise ValueError(f"no task metric here for {model.metric}")


SANITY = {"silero_vad_jit": sanity_silero_vad_jit, "tempocnn_cnn": sanity_tempocnn_cnn,
          "oww_embedding": sanity_oww_embedding, "oww_melspec": sanity_oww_melspec, "magika_v3": sanity_magika_v3,
          "ddddocr_ocr": sanity_ddddocr_ocr, "ddddocr_det": sanity_ddddocr_det, "g2p_en_gru": sanity_g2p_en_gru,
          "selfie_seg": sanity_selfie_seg}
