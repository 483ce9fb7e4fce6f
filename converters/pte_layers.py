"""Per-layer drift of an int8 ExecuTorch program, traced on the PT2E graph it is lowered from.

XNNPACK runs a .pte as one delegate call that keeps no intermediates, so the int8 side is the
PT2E-quantized GraphModule the converter lowers (rebuilt with the same quantizer, calibration data
and method, edgekit.converters.torch_to_pte.quantize_int8, which hands it here) and the float side is the exported
program it was quantized from. Both run node by node in torch.fx's Interpreter, one sample at a time.

PT2E keeps the float graph's node names, so compute nodes are matched by name. Each one's int8
output is the value the next layer sees: after the quantize→dequantize pair on its output when it
has one (a conv fused with its ReLU has none: the ReLU's output carries it). A float node that
vanished from the quantized graph right after its only producer (a BatchNorm folded into its conv)
is taken as part of that producer. A model input's entry is the SQNR of its own quantization.
"""

from __future__ import annotations

import operator

import numpy as np

from edgekit.core.drift import SqnrSums, Traced, rank, sqnr_db

QDQ_NAMESPACES = frozenset({"quantized_decomposed", "torchao"})
WEIGHTED = ("conv", "linear")  # ops whose args[1] is the weight
BATCH_NORMS = {"batch_norm": 7, "_native_batch_norm_legit_no_training": 6}  # op → index of eps


def trace(source, quantized, inputs: dict[str, np.ndarray]):
    """The layers of the PT2E-quantized GraphModule `quantized` that an int8 .pte of `source` is lowered from,
    ranked by the SQNR they lose on `inputs` against the source's exported program."""
    traced, sqnr = compare(source.exported().module(), quantized, inputs, source.signature.input_names)
    return rank(traced, sqnr)


def _weights(pairs, fnodes) -> dict:
    """{key: (the quantized node computing a weighted op's dequantized weight, the float weight node)}."""
    import torch

    weights = {}
    for key, n, _f, _seen_nodes in pairs:
        if n.op == "call_function" and _op(n).startswith(WEIGHTED) and len(n.args) > 1 \
                and isinstance(n.args[1], torch.fx.Node) and _is_constant(n.args[1]):
            fw = fnodes[key].args[1] if len(fnodes[key].args) > 1 else None
            if isinstance(fw, torch.fx.Node):
                weights[key] = (n.args[1], fw)
    return weights


def _activation_sqnr(float_module, quantized, inputs, input_names, pairs, q_once: set) -> tuple[dict, dict]:
    """({key: SQNR dB of the values the next layers see}, {name: value} of the `q_once` constants), each
    sample run through both graphs on its own."""
    import torch

    q_wanted = {m.name for _k, _n, _f, seen in pairs for m in seen}
    f_wanted = {f.name for _k, _n, f, _s in pairs}
    sums = SqnrSums()
    q_const: dict[str, list[np.ndarray]] = {}
    with torch.no_grad():
        for i in range(len(inputs[input_names[0]])):
            args = _sample_args(float_module, inputs, input_names, i)
            fvals = _run(float_module, args, f_wanted)
            qvals = _run(quantized, args, q_wanted | (q_once if i == 0 else set()))
            if i == 0:
                q_const = {k: qvals[k] for k in q_once if k in qvals}
            for key, n, f, seen in pairs:
                if f.name not in fvals or not all(m.name in qvals for m in seen):
                    continue
                ref = _pick(fvals[f.name], n, seen)
                act = [a for m in seen for a in qvals[m.name]]
                if len(ref) != len(act) or any(r.shape != a.shape for r, a in zip(ref, act)):
                    continue  # not the same tensor after all: leave it out
                for r, a in zip(ref, act):
                    sums.add(key, r, a)
    return sums.result(), q_const


def compare(float_module, quantized, inputs: dict[str, np.ndarray],
            input_names) -> tuple[list[Traced], dict[str, float]]:
    """(traced compute nodes of `quantized`, {float node name: SQNR dB}) over the samples in `inputs`.

    `inputs` hold a leading sample axis; each sample runs through both graphs on its own.
    """
    import torch

    fnodes = {n.name: n for n in float_module.graph.nodes}
    qnames = {n.name for n in quantized.graph.nodes}
    pairs = []  # (key, quantized node, float reference node, quantized nodes whose outputs the next layers see)
    for n in quantized.graph.nodes:
        if n.op == "placeholder" and n.name in fnodes:
            pairs.append((n.name, n, fnodes[n.name], _seen(n)))
        elif _is_compute(n) and n.name in fnodes:
            pairs.append((n.name, n, _folded_into(fnodes[n.name], qnames), _seen(n)))

    weights = _weights(pairs, fnodes)
    sqnr, q_const = _activation_sqnr(float_module, quantized, inputs, input_names, pairs,
                                     {qw.name for qw, _fw in weights.values()})

    traced = []
    for key, n, f, _seen_nodes in pairs:
        if n.op == "placeholder":  # a model input's quantization counts as a layer, as on the other backends
            traced.append(Traced(f"input {key}", "quantize", key, ()))
            continue
        weight_db = None
        if key in weights and weights[key][0].name in q_const:
            qw, fw = weights[key]
            float_w = _float_weight(float_module, fw, fnodes[key], f)
            if float_w is not None:
                (dq,) = q_const[qw.name]
                if dq.shape == float_w.shape:
                    weight_db = sqnr_db(float_w, dq)
        traced.append(Traced(_layer(n), _op(n), key, _activation_inputs(n), weight_db))
    return traced, sqnr


# --- graph plumbing -------------------------------------------------------------------------------

def _namespace(n) -> str | None:
    return getattr(n.target, "namespace", None) if n.op == "call_function" else None


def _is_qdq(n) -> bool:
    if _namespace(n) not in QDQ_NAMESPACES:
        return False
    name = _op(n)
    return "quantize" in name or "choose_qparams" in name


def _is_quantize(n) -> bool:
    return _is_qdq(n) and _op(n).startswith("quantize")


def _is_dequantize(n) -> bool:
    return _is_qdq(n) and _op(n).startswith("dequantize")


def _is_compute(n) -> bool:
    return n.op == "call_function" and n.target is not operator.getitem and not _is_qdq(n)


def _is_constant(n) -> bool:
    """Computed from get_attr nodes only (a weight, possibly behind its dequantize)."""
    while _is_qdq(n):
        n = n.args[0]
    return n.op == "get_attr"


def _op(n) -> str:
    """conv2d for aten.conv2d.default; the callable's name otherwise."""
    target = n.target
    name = getattr(target, "_opname", None) or getattr(target, "__name__", None) or str(target)
    return name.rsplit(".", 1)[0] if name.endswith(".default") else name


def _layer(n) -> str:
    stack = n.meta.get("nn_module_stack") or {}
    if stack:
        path = list(stack.values())[-1][0]
        if path:
            return path
    return n.name


def _seen(n) -> list:
    """The node(s) whose outputs the next layers see in place of `n`'s: its quantize→dequantize
    pair's dequantize where there is one; for a tuple output, that of each getitem in index order."""
    items = [u for u in n.users if u.op == "call_function" and u.target is operator.getitem]
    if items and len(items) == len(n.users):
        return [_seen(u)[0] for u in sorted(items, key=lambda u: u.args[1])]
    for u in n.users:
        if _is_quantize(u):
            for d in u.users:
                if _is_dequantize(d):
                    return [d]
    return [n]


def _pick(ref: list[np.ndarray], n, seen: list) -> list[np.ndarray]:
    """The float outputs matching `seen`: all of them, or those of the getitems `seen` comes from."""
    if seen == [n] or len(seen) == len(ref) == 1:
        return ref
    indices = []
    for m in seen:
        while m.target is not operator.getitem:  # dequantize → quantize → getitem
            m = m.args[0]
        indices.append(m.args[1])
    return [ref[i] for i in indices if i < len(ref)]


def _folded_into(f, qnames: set):
    """`f`, or the node a float op vanished into when the quantizer folded it into `f` (conv→BN)."""
    while len(f.users) == 1:
        (u,) = f.users
        if u.name in qnames or u.op != "call_function" or not u.args or u.args[0] is not f:
            break
        f = u
    return f


def _activation_inputs(n) -> tuple[str, ...]:
    """Keys of the compute nodes or placeholders feeding `n`, traced back through quantize/dequantize
    and getitem; weights and other constants left out."""
    keys = []
    for a in n.all_input_nodes:
        while _is_qdq(a) or (a.op == "call_function" and a.target is operator.getitem):
            a = a.args[0]
        if a.op in ("placeholder", "call_function") and a.name not in keys:
            keys.append(a.name)
    return tuple(keys)


# --- running --------------------------------------------------------------------------------------

def _sample_args(module, inputs, input_names, i: int) -> list:
    """Sample `i` of every input, shaped as the graph's placeholder (a batch axis of 1 added if the
    samples carry none), as fresh contiguous tensors."""
    import torch

    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    args = []
    for name, ph in zip(input_names, placeholders):
        x = np.array(inputs[name][i], copy=True)
        val = ph.meta.get("val")
        if val is not None and hasattr(val, "shape") and x.ndim == len(val.shape) - 1:
            x = x[None]
        args.append(torch.from_numpy(x))
    return args


def _run(module, args, wanted: set) -> dict[str, list[np.ndarray]]:
    """Run `module` on `args` node by node; the float64 outputs of the `wanted` nodes (a tuple
    output as its tensors in order)."""
    import torch

    values = {}

    class Capture(torch.fx.Interpreter):
        """The graph run as usual, keeping the outputs of the `wanted` nodes on the way."""

        def run_node(self, n):
            """Run `n` unchanged; a wanted node's tensors are kept as float64 arrays (a node with none, not at all)."""
            out = super().run_node(n)
            if n.name in wanted:
                tensors = _tensors(out)
                if tensors:
                    values[n.name] = [t.detach().to(torch.float64).numpy() for t in tensors]
            return out

    Capture(module).run(*args)
    return values


def _tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _float_weight(float_module, fw, fnode, ref) -> np.ndarray | None:
    """The float weight of `fnode`, with any BatchNorm the quantizer folded into it folded in too."""
    import torch

    w = _attr(float_module, fw)
    if w is None:
        return None
    w = w.detach().to(torch.float64)
    m = fnode
    while m is not ref:
        (m,) = m.users
        eps_at = BATCH_NORMS.get(_op(m))
        if eps_at is None or _op(fnode).startswith("conv_transpose") or len(m.args) <= eps_at:
            return None  # folded, but not in a way recomputed here
        gamma, var = _attr(float_module, m.args[1]), _attr(float_module, m.args[4])
        if var is None:
            return None
        scale = (1.0 if gamma is None else gamma.detach().to(torch.float64)) / torch.sqrt(
            var.detach().to(torch.float64) + float(m.args[eps_at]))
        w = w * torch.as_tensor(scale, dtype=torch.float64).reshape((-1,) + (1,) * (w.dim() - 1))
    return w.numpy()


def _attr(module, node):
    """The tensor a get_attr node reads, or None."""
    if getattr(node, "op", None) != "get_attr":
        return None
    obj = module
    for part in node.target.split("."):
        obj = getattr(obj, part, None)
    return obj
