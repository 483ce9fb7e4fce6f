"""Did it really quantize? Read an artifact and report which weights and which kernels are int8.

A quantized file can still run float kernels: weight-only recipes dequantize before every op, and a
PT2E-quantized .pte without a delegate runs float portable kernels between quantize/dequantize.
`inspect_artifact` reads the file itself and reports two numbers:

- `int8_weight_share`: bytes of int8/uint8/int4/uint4 constants over all constant bytes
  (quantization scales and zero points are left out of both).
- `int8_compute_share`: share of compute ops (data movement and quantize/dequantize excluded) whose
  kernel takes int8 activations (`int8`) or quantizes float activations on the fly (`dynamic`).
- `int8_heavy_op_share`: the same share over the multiply-accumulate ops only (convolutions,
  matrix multiplies, fully-connected), where nearly all of the arithmetic is. Elementwise ops left
  in float (activations, squeeze-excitation gates) are common in real int8 models; float
  convolutions are not.

The rules are static: they say what the graph asks for, not which kernel a runtime finally picks.
Each reader also reads the file's input and output shapes (`io_shapes`): a dynamic dimension is None
or its symbolic name in `shape`, and its index is listed in `dynamic`; a shape the file does not
record is None (`shape` and `dynamic` both), said in the notes.
Importing this module is cheap; each format's reader imports its framework only when called.
"""

from __future__ import annotations

import collections
import math
from typing import Iterable

from edgekit.core.errors import BadInput
from edgekit.core.inspection import HEAVY_OPS, INT8_FAMILY, TOP_TENSORS, Inspection, OpInfo, RuntimeNeed
from edgekit.targets import by_format


# ExecuTorch op namespaces whose kernels a default runtime (portable kernels + XNNPACK) registers.
PTE_DEFAULT_NAMESPACES = frozenset({"aten", "dim_order_ops", "executorch_prim", "delegate", "xnnpack"})


def runtime_needs(fmt: str, op_counts: dict[str, int]) -> tuple[RuntimeNeed, ...]:
    """What beyond the runtime a default app has the artifact's ops need (op names as the readers give them:
    .pte `namespace::op`, .tflite `CUSTOM:code`, .onnx/.ort `domain:op` outside the default domain)."""
    by_need: dict[tuple, list[str]] = {}
    for op in op_counts:
        need = None
        if fmt == "pte" and "::" in op and op.split("::")[0] not in PTE_DEFAULT_NAMESPACES:
            ns = op.split("::")[0]
            need = (("executorch-quantized-kernels", "ExecuTorch's quantized kernel library (quantized_ops_lib; "
                     "in Python, import executorch.kernels.quantized)", ("executorch.kernels.quantized",))
                    if ns == "quantized_decomposed" else
                    (f"executorch-kernels:{ns}", f"a kernel library registering the {ns}:: operators", ()))
        elif fmt == "tflite" and op.startswith("CUSTOM:"):
            code = op[len("CUSTOM:"):]
            need = (("tflite-flex", "the TensorFlow Lite Flex delegate (select TensorFlow ops)", ())
                    if code.startswith("Flex") else (f"tflite-custom:{code}", f"the custom operator {code}", ()))
        elif fmt in ("onnx", "ort") and ":" in op:
            domain = op.split(":")[0]
            need = (("onnxruntime-contrib-ops", "ONNX Runtime's contrib operators (com.microsoft; in the standard "
                     "packages, to be included in a reduced build)", ()) if domain == "com.microsoft" else
                    (f"onnx-domain:{domain}", f"a custom operator library for the ONNX domain {domain}", ()))
        if need:
            by_need.setdefault(need, []).append(op)
    return tuple(RuntimeNeed(id, what, modules, tuple(ops)) for (id, what, modules), ops in by_need.items())


def build(fmt: str, *, weights: dict[str, int], ops: list[OpInfo], op_counts: dict[str, int],
          tensors: Iterable[dict], io_dtypes: dict, delegated: dict | None = None,
          notes: Iterable[str] = (), io_shapes: dict | None = None, duplicates: Iterable[dict] = (),
          executed: dict | None = None, entry_points: dict | None = None,
          weight_uses: Iterable[dict] = (), outside_delegate: list[str] | None = None) -> Inspection:
    """The shared tail of every reader: shares, float-op summary and the largest tensors; the LM view (`lm_view`)
    of its `entry_points` (default: the file's one graph, from `io_dtypes` and `io_shapes`) and `weight_uses`."""
    total = sum(weights.values())
    low = sum(n for dt, n in weights.items() if dt in INT8_FAMILY)
    groups = collections.Counter((o.type, o.mode) for o in ops if not o.int8)  # keeps first-seen order
    float_ops = tuple(f"{ty} ×{n}" + ("" if mode == "float" else f" ({mode})") for (ty, mode), n in groups.items())
    largest = sorted(tensors, key=lambda t: -t["bytes"])[:TOP_TENSORS]
    heavy = [o for o in ops if HEAVY_OPS.search(o.type)]
    return Inspection(
        format=fmt,
        weight_bytes_by_dtype=dict(sorted(weights.items(), key=lambda kv: -kv[1])),
        int8_weight_share=round(low / total, 4) if total else 0.0,
        ops=tuple(ops),
        compute_ops=len(ops),
        ops_by_mode=dict(collections.Counter(o.mode for o in ops)),
        int8_compute_share=round(sum(o.int8 for o in ops) / len(ops), 4) if ops else 0.0,
        int8_heavy_op_share=round(sum(o.int8 for o in heavy) / len(heavy), 4) if heavy else 0.0,
        float_ops=float_ops,
        op_counts=dict(collections.Counter(op_counts).most_common()),
        largest_tensors=tuple({**t, "shape": tuple(t["shape"])} for t in largest),
        io_dtypes={k: list(v) for k, v in io_dtypes.items()},
        delegated=delegated,
        notes=tuple(dict.fromkeys(notes)),
        io_shapes={k: list((io_shapes or {}).get(k, [])) for k in ("inputs", "outputs")},
        needs=runtime_needs(fmt, op_counts),
        duplicates=tuple(sorted(duplicates, key=lambda d: -d["bytes"])),
        executed=executed,
        lm=lm_view(entry_points or {"graph": lm_entry(io_dtypes, io_shapes)}, list(weight_uses), outside_delegate),
    )


def lm_entry(io_dtypes: dict, io_shapes: dict | None) -> dict:
    """One entry point (a method, a signature, a graph) in `lm_view`'s form: inputs and outputs as (dtype, shape
    or None), from a reader's `io_dtypes` and `io_shapes`."""
    out = {}
    for side in ("inputs", "outputs"):
        dtypes = io_dtypes.get(side, [])
        entries = (io_shapes or {}).get(side) or [{}] * len(dtypes)
        out[side] = [(dt, entries[i].get("shape")) for i, dt in enumerate(dtypes)]
    return out


def lm_view(entry_points: dict, weight_uses: list[dict], outside_delegate: list[str] | None = None) -> dict | None:
    """A decoder LM's facts from its file, or None when an entry point's inputs and outputs are not
    (tokens [1, T], positions [T], k cache, v cache) → (logits [1, T, vocab], new keys, new values), the form
    every LM converter writes (the new entries: the cache's shape with T positions, which the app writes in).
    `entry_points`: name → {"inputs", "outputs"}, each a list of (dtype, shape); `weight_uses`: the constants a
    lookup or a matmul reads, each {role: "lookup" | "matmul", dtype, dims, bytes, scheme}. Gives tokens per call
    of each entry point (None: any count), the cache (shape, dtype, bytes of both), the vocabulary, the weights
    by group (embedding: a lookup's table; lm_head: a matmul weight with a vocabulary-sized dimension; linears:
    the other matmul weights; a table looked up by position is none of these) with their dtype and scheme, and
    `outside_delegate`: the compute ops a delegating runtime (.pte) leaves to its own kernels."""
    tokens, cache = {}, None
    for name, io in entry_points.items():
        ins, outs = io["inputs"], io["outputs"]
        if len(ins) != 4 or len(outs) != 3 or any(s is None for _, s in ins + outs):
            return None
        (tok_t, tok), (pos_t, _), (k_t, k), (v_t, v) = ins
        new = outs[1][1]
        if not (tok_t.startswith("int") and pos_t.startswith("int") and len(tok) == 2 and len(k) == 4 and k == v
                and len(outs[0][1]) == 3 and len(new) == 4 and (new[:2], new[3]) == (k[:2], k[3]) and outs[2] == outs[1]
                and k_t == v_t and k_t.startswith("float")):
            return None
        tokens[name] = tok[1] if isinstance(tok[1], int) else None
        cache = (k_t, k, outs[0][1][-1])
    if cache is None:
        return None
    dtype, shape, vocab = cache
    groups: dict[tuple, dict] = {}
    for use in weight_uses:
        if use["role"] == "lookup" and (vocab not in use["dims"] or len(use["dims"]) < 2):
            continue  # a table looked up by position (RoPE) or a lookup's scales, not the embedding
        group = "embedding" if use["role"] == "lookup" else "lm_head" if vocab in use["dims"] else "linears"
        g = groups.setdefault((group, use["dtype"], use.get("scheme") or ""), {"tensors": 0, "bytes": 0})
        g["tensors"] += 1
        g["bytes"] += use["bytes"]
    view = {"entry_points": tokens, "vocab": vocab, "max_seq_len": shape[2],
            "cache": {"shape": list(shape), "dtype": dtype, "bytes": 2 * math.prod(shape) * _itemsize(dtype)},
            "weights": [{"group": g, "dtype": dt, "scheme": sc, **n} for (g, dt, sc), n in sorted(groups.items())]}
    if outside_delegate is not None:
        view["outside_delegate"] = list(outside_delegate)
    return view


def _itemsize(dtype: str) -> int:
    return {"float16": 2, "bfloat16": 2, "float64": 8}.get(dtype, 4)


def executed_view(fmt: str, runtime: str, ops: list[OpInfo], macs: dict[str, int] | None = None, **extra) -> dict:
    """`Inspection.executed`: the compute ops, modes, int8 shares and float ops of `ops` as `runtime` runs them,
    counted by `build`'s rules, with what the format's reader adds (`extra`). Where the reader gives the
    multiply-accumulates of the conv/matmul ops (`macs`, by op location), `int8_mac_share` is the share of
    those MACs run by int8 kernels: a float 1×1 conv and a float 3×3 conv of 512 channels differ a
    thousandfold, which op counts do not show."""
    ran = build(fmt, weights={}, ops=ops, op_counts={}, tensors=(), io_dtypes={})
    view = {"runtime": runtime, **extra, "compute_ops": ran.compute_ops, "ops_by_mode": dict(ran.ops_by_mode),
            "int8_compute_share": ran.int8_compute_share, "int8_heavy_op_share": ran.int8_heavy_op_share,
            "float_ops": list(ran.float_ops)}
    heavy = [o for o in ops if HEAVY_OPS.search(o.type)]
    if macs and heavy and all(macs.get(o.where, 0) > 0 for o in heavy):  # a conv of unknown MACs: no share
        total = sum(macs[o.where] for o in heavy)
        view.update(heavy_macs=total, int8_mac_share=round(sum(macs[o.where] for o in heavy if o.int8) / total, 4))
    return view


def heavy_macs(output: list[int], weight: list[int] | None = None, inner: int | None = None, channels: int = -1) -> int:
    """Multiply-accumulates of a conv, depthwise conv or linear whose output channels are `output[channels]`
    (its weight's elements per output channel each, so one formula fits [Cout, kh, kw, Cin], [1, kh, kw, C],
    [Cout, Cin/g, kh, kw] and [Cout, Cin]) or of a matmul (`inner`: the shared dimension). 0 when a shape is
    unknown."""
    if not output or any(not isinstance(d, int) or d < 0 for d in output):
        return 0
    if inner is not None:
        return math.prod(output) * inner
    if not weight or any(not isinstance(d, int) for d in weight) or not output[channels]:
        return 0
    return math.prod(output) * math.prod(weight) // output[channels]


def io_entry(name: str, dims) -> dict:
    """One input or output of `io_shapes`: `dims` are ints, with a dynamic one as None or its symbolic
    name; `dynamic` lists the indices of the dynamic ones. `dims` None: the file does not record the shape."""
    if dims is None:
        return {"name": name, "shape": None, "dynamic": None}
    shape = [d if d is None or isinstance(d, str) else int(d) for d in dims]
    return {"name": name, "shape": shape, "dynamic": [i for i, d in enumerate(shape) if not isinstance(d, int)]}


def inspect_artifact(fmt: str, path: str) -> Inspection:
    """Inspect the artifact at `path` with its target's reader; `fmt` is a target format id."""
    try:
        target = by_format(fmt)
    except KeyError:
        raise BadInput(f"cannot inspect format {fmt!r}", fix="use tflite, onnx, pte, ort or ptl") from None
    return target.backend.inspect_file(path)


