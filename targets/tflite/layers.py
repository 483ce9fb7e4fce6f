"""Per-layer drift of an int8 .tflite against the fp32 .tflite made from the same source.

Both models run in the LiteRT interpreter with every intermediate tensor kept. Their op-type
sequences are aligned as a diff would once QUANTIZE and DEQUANTIZE are set aside (the int8 model is
mostly the fp32 graph with those added; where one side has extra ops, they join the layer before
them); ops left over are matched by output tensor name.
litert-torch names tensors after torch.export locations, which give the source module path.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np

from edgekit.core.drift import SqnrSums, Traced, module_path_from_location, sqnr_db
from edgekit.core.signature import Signature
from edgekit.targets.tflite.runner import TfliteRunner

BOUNDARY_OPS = frozenset({"QUANTIZE", "DEQUANTIZE"})
# Module classes that name a layer, in order of preference (a conv with its BatchNorm folded in is the conv).
PARAMETRIZED = ((".conv.", ".linear.", "Conv", "Linear", "Dense", "Embedding"), ("norm.", "Norm"))


class _Traced:
    """One model loaded with intermediates kept: its ops, tensors, and a way to read them as float."""

    def __init__(self, path: str, signature: Signature):
        self.runner = TfliteRunner(path, signature, keep_intermediates=True)
        interp = self.runner.interp
        self.tensors = {t["index"]: t for t in interp.get_tensor_details()}
        self.ops = [op for op in interp._get_ops_details() if op["op_name"] != "DELEGATE"]
        produced = {i for op in self.ops for i in op["outputs"]}
        self.inputs = [d["index"] for d in interp.get_input_details()]
        self.activations = produced | set(self.inputs)

    def run(self, feeds: dict[str, np.ndarray]) -> None:
        self.runner.run(feeds)

    def value(self, index: int) -> np.ndarray:
        return dequantized(self.runner.interp.get_tensor(index), self.tensors[index])


def dequantized(x: np.ndarray, detail: dict) -> np.ndarray:
    if np.dtype(x.dtype).kind not in "iu":
        return np.asarray(x, dtype=np.float64)
    q = detail.get("quantization_parameters") or {}
    scales, zeros = np.asarray(q.get("scales", [])), np.asarray(q.get("zero_points", []))
    if scales.size == 0:
        return np.asarray(x, dtype=np.float64)
    if scales.size == 1:
        return (x.astype(np.float64) - zeros.ravel()[0]) * scales.ravel()[0]
    shape = [1] * x.ndim
    shape[q.get("quantized_dimension", 0)] = scales.size
    return (x.astype(np.float64) - zeros.reshape(shape)) * scales.reshape(shape)


def layer_name(names: list[str], fallback: str) -> str:
    """The module path of the parametrized module among `names`' torch.export locations."""
    locations = [part for name in names for part in name.split(";") if "/" in part]
    for kinds in PARAMETRIZED:
        for loc in locations:
            if any(p in loc for p in kinds) and module_path_from_location(loc):
                return module_path_from_location(loc)
    for loc in locations:
        if module_path_from_location(loc):
            return module_path_from_location(loc)
    # Not a torch location (a TensorFlow source): the tensor's own name, which names its layer.
    return next((part for name in names for part in name.split(";") if "/" in part), fallback)


def trace(float_path: str, quant_path: str, signature: Signature, inputs: dict[str, np.ndarray], *, gains: bool = False):
    """(traced ops of the int8 model, {tensor key: SQNR dB}) over the samples in `inputs`. `gains` are not
    measured here (the interpreter runs the int8 .tflite as written: no op of it can be run float alone)."""
    ref, qnt = _Traced(float_path, signature), _Traced(quant_path, signature)
    keys, traced = _keys(ref, qnt, _align(ref, qnt), signature.input_names)
    sums = SqnrSums()
    for i in range(len(next(iter(inputs.values())))):
        feeds = {k: v[i] for k, v in inputs.items()}
        ref.run(feeds)
        qnt.run(feeds)
        for q_index, (key, r_index) in keys.items():
            reference, actual = ref.value(r_index), qnt.value(q_index)
            if reference.shape == actual.shape:
                sums.add(key, reference, actual)
    return traced, sums.result()


def _align(ref: _Traced, qnt: _Traced) -> dict[int, tuple[dict, str]]:
    """int8 op index → (the fp32 op whose output it must match, the int8 ops' label).

    The op sequences (QUANTIZE/DEQUANTIZE set aside) are aligned as a diff would, by op type and the module
    holding the one its torch.export location names (by type alone where most ops have none): two blocks of the same ops
    are never taken for each other. A layer each model spells in different ops (an int8 hardswish written
    as ADD, MUL, MUL for XNNPACK) matches at its last op. Where the
    int8 model has extra ops after an aligned one (an activation the fp32 model folds into its
    conv, say), the fp32 output matches the end of that run, not its first op: the run is one layer
    ("CONV_2D+ADD"). Likewise where the fp32 model has the extra ops. Ops left over are matched by
    output tensor name.
    """
    q_ops = [op for op in qnt.ops if op["op_name"] not in BOUNDARY_OPS]
    a, b = _sequence(qnt, q_ops), _sequence(ref, ref.ops)
    if not (_located(a) and _located(b)):  # no torch locations on both sides (a TensorFlow source): types alone
        a, b = [(t, "") for t, _ in a], [(t, "") for t, _ in b]
    pairs: dict[int, int] = {}  # position in q_ops → position in ref.ops
    runs: dict[int, int] = {}  # position in q_ops → where its run starts
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            pairs.update({i1 + k: j1 + k for k in range(i2 - i1)})
        elif tag == "delete" and i1 > 0 and i1 - 1 in pairs:  # only int8 has a[i1:i2]: they extend a[i1-1]
            pairs[i2 - 1] = pairs.pop(i1 - 1)
            runs[i2 - 1] = runs.pop(i1 - 1, i1 - 1)
        elif tag == "insert" and i1 > 0 and i1 - 1 in pairs:  # only fp32 has b[j1:j2]: they extend b[j1-1]
            pairs[i1 - 1] = j2 - 1
        elif tag == "replace" and a[i2 - 1][1] and a[i2 - 1][1] == b[j2 - 1][1]:  # one layer spelled otherwise
            pairs[i2 - 1], runs[i2 - 1] = j2 - 1, i1  # (a hardswish as ADD, MUL, MUL): their outputs match
    a = [t for t, _ in a]
    out = {q_ops[i]["index"]: (ref.ops[j], "+".join(a[runs.get(i, i):i + 1])) for i, j in pairs.items()}
    taken = {r["index"] for r, _ in out.values()}
    by_name = {ref.tensors[op["outputs"][0]]["name"]: op for op in ref.ops if op["index"] not in taken}
    for q in q_ops:
        r = by_name.get(qnt.tensors[q["outputs"][0]]["name"])
        if q["index"] not in out and r is not None and r["op_name"] == q["op_name"]:
            out[q["index"]] = (r, q["op_name"])
    return out


def _sequence(traced: _Traced, ops: list[dict]) -> list[tuple[str, str]]:
    """(op type, the module holding the module its output's torch.export location names, or "") of each op: the
    holder, since a conv with its BatchNorm folded in is named after either (`block.0.0`, `block.0.1`)."""
    out = []
    for op in ops:
        locations = [p for p in traced.tensors[op["outputs"][0]]["name"].split(";") if "/" in p]
        path = next((m for loc in locations if (m := module_path_from_location(loc))), "")
        out.append((op["op_name"], path.rpartition(".")[0] or path))
    return out


def _located(sequence: list[tuple[str, str]]) -> bool:
    return sum(bool(path) for _, path in sequence) >= len(sequence) / 2


def _keys(ref: _Traced, qnt: _Traced, pairs: dict[int, tuple[dict, str]], input_names: tuple[str, ...]):
    """Which int8 tensor to compare with which fp32 tensor, under what key; and the traced ops.

    The model inputs compare with themselves (key input:N); a QUANTIZE output compares with the
    float tensor its input stands for (the quantization noise of that boundary); a DEQUANTIZE
    output is its input again.
    """
    key_of: dict[int, str] = {}
    ref_of: dict[str, int] = {}
    for j, (q_in, r_in) in enumerate(zip(qnt.inputs, ref.inputs)):
        key_of[q_in], ref_of[f"input:{j}"] = f"input:{j}", r_in
    compare: dict[int, tuple[str, int]] = {}
    traced = []
    for op in qnt.ops:
        ins = [i for i in op["inputs"] if i in qnt.activations and i in key_of]
        out = op["outputs"][0]
        name = op["op_name"]
        if name in BOUNDARY_OPS and ins:
            base = key_of[ins[0]]
            if name == "DEQUANTIZE":
                key_of[out] = base
                continue
            key_of[out] = f"{base}@quantized"
            if base not in ref_of:  # quantizing what has no fp32 counterpart (an op kept float): passes its level on
                traced.append(Traced(layer_name([qnt.tensors[out]["name"]], f"quantize_{op['index']}"), name,
                                     key_of[out], (base,)))
                continue
            compare[out] = (key_of[out], ref_of[base])
            ref_of[key_of[out]] = ref_of[base]
            if base.startswith("input:"):  # the model input's quantization is a layer of its own
                j = int(base.partition(":")[2])
                traced.append(Traced(f"input {input_names[j] if j < len(input_names) else j}", name, key_of[out], ()))
            continue
        r, label = pairs.get(op["index"], (None, name))
        if r is None:  # no fp32 counterpart: traced without an SQNR of its own
            key_of[out] = f"int8-op{op['index']}"
            traced.append(Traced(layer_name([qnt.tensors[out]["name"]], f"{name.lower()}_{op['index']}"), name,
                                 key_of[out], tuple(key_of[i] for i in ins)))
            continue
        key = f"op{r['index']}"
        key_of[out], ref_of[key] = key, r["outputs"][0]
        compare[out] = (key, r["outputs"][0])
        own = [*r["outputs"], *(i for i in r["inputs"] if i >= 0 and i not in ref.activations)]
        names = [ref.tensors[i]["name"] for i in own]
        traced.append(Traced(layer_name(names, f"{name.lower()}_{r['index']}"), label, key,
                             tuple(key_of[i] for i in ins),
                             _weight_sqnr(ref, qnt, r, op)))
    return compare, traced


def _weight_sqnr(ref: _Traced, qnt: _Traced, r: dict, q: dict) -> float | None:
    """SQNR of the op's first constant input (its weights) against the fp32 weights."""
    q_w = [i for i in q["inputs"] if i >= 0 and i not in qnt.activations]
    r_w = [i for i in r["inputs"] if i >= 0 and i not in ref.activations]
    if not q_w or not r_w:
        return None
    qd, rd = qnt.tensors[q_w[0]], ref.tensors[r_w[0]]
    if (np.dtype(qd["dtype"]).kind not in "iu" or np.dtype(rd["dtype"]).kind != "f"
            or tuple(qd["shape"]) != tuple(rd["shape"])):
        return None
    return sqnr_db(ref.runner.interp.get_tensor(r_w[0]), qnt.value(q_w[0]))
