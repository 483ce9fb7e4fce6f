"""A recurrent layer's unrolled steps kept in one XNNPACK partition of a .pte.

`torch.export` keeps an `nn.LSTM`/`nn.GRU`/`nn.RNN` (or a cell called in a loop) as one op, which
ExecuTorch's edge lowering decomposes into its time steps. Each step takes its input row and splits its
gates with view ops XNNPACK's partitioner has no config for (`squeeze_copy`, `split_with_sizes_copy`;
`select_copy`, `unsqueeze_copy` on a leading dimension, `unbind_copy` in other spellings): those stay in
the portable kernels, between every two steps, so the delegate is cut into one partition per step (a
2-layer LSTM over 160 steps: 325 delegate calls). ExecuTorch then lowers each partition on its own (a
submodule cut out of the whole graph, XNNPACK's ~15 passes re-tracing it, a serialized XNNPACK graph),
which is what made a 3-layer LSTM over 160 steps take 23 minutes at fp32 and more than half an hour at
int8.

`delegable_views` rewrites those ops as the ops XNNPACK takes for the same data movement: a squeeze or
an unsqueeze is a `view_copy` (a reshape), a split is one `slice_copy` per piece, a select is a
`slice_copy` then a `view_copy`. Values are unchanged (they are copies of the same elements), the steps
join one partition and the app still needs only the XNNPACK delegate and the portable kernels.

At int8 the same layer must be unrolled before PT2E sees it: XNNPACKQuantizer annotates `linear`, `add`,
`mul`, not `aten.lstm`, which it leaves float whole (a 2-layer LSTM's int8 .pte stored 1.7% of its weights
as int8 and failed verification). `UnrolledSource` hands the quantizer the program with only the recurrent
ops decomposed (`unrolled`, torch.export's own decompositions): per step a `linear` for each weight, the
gates' sigmoid/tanh, their products and sums, which it quantizes as it does any linear and elementwise op.

What is not solved at int8: a split of the dequantized int8 gates moved into XNNPACK as slices reads wrong
(cosine 0.957 to its own PT2E graph on a 2-layer LSTM, with or without a quantize/dequantize pair of the
gates' parameters after each slice), so that split stays outside the delegate and an int8 recurrence still
lowers as one partition per step and layer. Its other view ops are rewritten, the moves of an int8 tensor
keeping its parameters (`_share_qparams`).

Only a graph holding a recurrent layer is touched (`is_recurrent`): any other model lowers exactly as
before, its .pte byte for byte the same.
"""

from __future__ import annotations

import operator
import weakref

# module types whose unrolling the rewrite is for (nn_module_stack's type names)
RECURRENT = ("torch.nn.modules.rnn.",)
# their ops as torch.export keeps them (aten), decomposed into their steps by `unrolled`
RECURRENT_OPS = ("lstm.input", "gru.input", "rnn_tanh.input", "rnn_relu.input",
                 "lstm_cell.default", "gru_cell.default", "rnn_tanh_cell.default", "rnn_relu_cell.default")

_REWRITTEN = "edgekit_delegable_view"  # meta key marking the nodes delegable_views made
_unrolled: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # program → its unrolled copy


def is_recurrent(program) -> bool:
    """Whether `program` (an ExportedProgram, ATen or edge, or a dict of them) holds a layer of torch's
    recurrent modules (LSTM, GRU, RNN and their cells), which ExecuTorch lowers unrolled, one copy of the
    cell per step."""
    if isinstance(program, dict):
        return any(is_recurrent(p) for p in program.values())
    for node in program.graph.nodes:
        for _path, kind in (node.meta.get("nn_module_stack") or {}).values():
            if str(kind).startswith(RECURRENT):
                return True
    return False


def unrolled(program):
    """`program` (an ATen ExportedProgram) with its recurrent ops decomposed into their steps and nothing
    else decomposed (a `linear` stays a `linear`); made once per program."""
    import torch

    found = _unrolled.get(program)
    if found is None:
        every = torch.export.default_decompositions()
        ops = [getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1]) for name in RECURRENT_OPS]
        present = {n.target for n in program.graph.nodes if n.op == "call_function"}
        table = {op: every[op] for op in ops if op in present}
        found = _unrolled[program] = program.run_decompositions(table) if table else program
    return found


class UnrolledSource:
    """A TorchSource whose `exported()` is its program `unrolled`: what PT2E quantizes for a recurrent
    model. Everything else is the source's own."""

    def __init__(self, source):
        self._source = source

    def exported(self):
        """The source's ExportedProgram, its recurrent layers unrolled."""
        return unrolled(self._source.exported())

    def __getattr__(self, name):
        return getattr(self._source, name)


def delegable_views(graph_module):
    """An ExecuTorch transform pass (edge dialect): the view ops XNNPACK has no partitioner config for
    rewritten as ones it has, where every shape is static. Returns torch.fx's PassResult."""
    from torch.fx.passes.infra.pass_base import PassResult

    graph = graph_module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op == "call_function" and _static(node):
            rewrite = _REWRITES.get(_name(node.target))
            source = node.args[0] if node.args else None
            if rewrite is not None and rewrite(graph, node):
                _share_qparams(graph, source)
                changed = True
    if changed:
        graph.eliminate_dead_code()
        graph.lint()
        graph_module.recompile()
    return PassResult(graph_module, changed)


def _share_qparams(graph, source) -> None:
    """In an int8 graph, every tensor a rewritten view op reads out of the dequantized `source` quantized
    with `source`'s own scale and zero point before anything else reads it.

    XNNPACK takes a `view_copy` or a `slice_copy` between a dequantize and a quantize as a move of the int8
    values, its output under the quantize's parameters, which misreads them unless they are the input's.
    While the op ran outside the delegate it worked on the dequantized float, which PT2E requantized with a
    scale of its own where the next op is quantized (a step's row of the input projection feeding an add).
    Here the quantize after the op takes the source's parameters and, where none follows, a
    quantize/dequantize pair with them is added: both exact, the values being on that grid already and
    within its range."""
    if not _is_qdq(source, "dequantize_per_tensor.default"):
        return
    params = tuple(source.args[1:])
    seen, todo = set(), [u for u in source.users if u.meta.get(_REWRITTEN)]
    while todo:  # the rewritten ops (a slice, a view after it) reading `source`, up to what reads their output
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        others = []
        for user in list(node.users):
            if user.meta.get(_REWRITTEN):
                todo.append(user)
            elif _is_qdq(user, "quantize_per_tensor.default"):
                if tuple(user.args[1:]) != params:
                    user.args = (user.args[0], *params)
                    for dq in list(user.users):
                        if _is_qdq(dq, "dequantize_per_tensor.default"):
                            dq.args = (dq.args[0], *params)
            else:
                others.append(user)
        if others:
            q = _insert(graph, others[0], "quantize_per_tensor.default", (node, *params), node.meta,
                        _val(node).to(params[-1]), "quantized_decomposed")
            dq = _insert(graph, others[0], "dequantize_per_tensor.default", (q, *params), node.meta, _val(node),
                         "quantized_decomposed")
            for user in others:
                user.replace_input_with(node, dq)


def _is_qdq(node, name: str) -> bool:
    """Whether `node` is quantized_decomposed's `name` with its parameters as constants."""
    import torch

    return (isinstance(node, torch.fx.Node) and node.op == "call_function"
            and getattr(node.target, "__name__", "") == f"quantized_decomposed.{name}"
            and not any(isinstance(a, torch.fx.Node) for a in node.args[1:]))


def _name(target) -> str:
    """An edge op's `aten` overload name ("squeeze_copy.dims"), else ""."""
    name = getattr(target, "__name__", "")  # "aten.squeeze_copy.dims" for edge ops
    return name.removeprefix("aten.") if name.startswith("aten.") else ""


def _val(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _static(node) -> bool:
    """Whether `node`, its tensor input and its tensor outputs have static shapes."""
    import torch

    def shapes(v):
        if isinstance(v, torch.Tensor):
            return [v.shape]
        if isinstance(v, (list, tuple)):
            return [s for x in v for s in shapes(x)]
        return None if v is None else []

    vals = [_val(node)] + ([_val(node.args[0])] if node.args and isinstance(node.args[0], torch.fx.Node) else [])
    found = [shapes(v) for v in vals]
    return all(f is not None for f in found) and all(
        isinstance(d, int) for f in found for s in f for d in s)


def _edge(name: str, namespace: str = "aten"):
    from executorch.exir.dialects._ops import ops as exir_ops

    packet, overload = name.split(".")
    return getattr(getattr(getattr(exir_ops.edge, namespace), packet), overload)


def _insert(graph, before, name: str, args: tuple, meta: dict, val, namespace: str = "aten"):
    """A new edge op node `name`(args) before `before`, with `meta` (the node it stands for) and `val`."""
    with graph.inserting_before(before):
        new = graph.call_function(_edge(name, namespace), args)
    new.meta.update(meta)
    new.meta.pop("tensor_meta", None)
    new.meta["val"] = val
    if namespace == "aten":  # a view op of the rewrite; its quantize/dequantize pairs are not
        new.meta[_REWRITTEN] = True
    else:
        new.meta.pop(_REWRITTEN, None)
    return new


def _as_view(graph, node) -> bool:
    """A squeeze or an unsqueeze: a reshape to its output's shape. XNNPACK takes an unsqueeze on the last
    dimension as it is: that one is left."""
    if _name(node.target) == "unsqueeze_copy.default" and node.args[1] in (-1, _val(node).dim() - 1):
        return False
    view = _insert(graph, node, "view_copy.default", (node.args[0], list(_val(node).shape)), node.meta, _val(node))
    node.replace_all_uses_with(view)
    return True


def _slice(graph, before, source, dim: int, start: int, end: int, meta: dict):
    val = _val(source).narrow(dim, start, end - start)
    return _insert(graph, before, "slice_copy.Tensor", (source, dim, start, end, 1), meta, val)


def _select_as_slice(graph, node) -> bool:
    """x.select(dim, i): a one-long slice at i, reshaped to drop `dim`."""
    source, dim, index = node.args[:3]
    size = _val(source).shape[dim]
    index = index + size if index < 0 else index
    dim = dim + _val(source).dim() if dim < 0 else dim
    piece = _slice(graph, node, source, dim, index, index + 1, node.meta)
    view = _insert(graph, node, "view_copy.default", (piece, list(_val(node).shape)), node.meta, _val(node))
    node.replace_all_uses_with(view)
    return True


def _pieces_as_slices(graph, node) -> bool:
    """A split (or unbind): each piece its own slice (an unbind's reshaped to drop the dimension), in place
    of the getitem that read it."""
    source = node.args[0]
    if _is_qdq(source, "dequantize_per_tensor.default"):
        return False  # see the module's docstring: int8 gates split inside XNNPACK read wrong
    name = _name(node.target)
    ndim = _val(source).dim()
    if name == "unbind_copy.int":
        dim = node.args[1] if len(node.args) > 1 else 0
        sizes = [1] * _val(source).shape[dim % ndim]
    else:
        dim = node.args[2] if len(node.args) > 2 else 0
        total = _val(source).shape[dim % ndim]
        if name == "split_copy.Tensor":
            step = node.args[1]
            sizes = [min(step, total - s) for s in range(0, total, step)]
        else:
            sizes = list(node.args[1])
    dim %= ndim
    if any(u.op != "call_function" or u.target is not operator.getitem for u in node.users):
        return False
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for user in list(node.users):
        i = user.args[1]
        piece = _slice(graph, user, source, dim, starts[i], starts[i] + sizes[i], user.meta)
        if name == "unbind_copy.int":
            piece = _insert(graph, user, "view_copy.default", (piece, list(_val(user).shape)), user.meta, _val(user))
        user.replace_all_uses_with(piece)
        graph.erase_node(user)
    return True


_REWRITES = {
    "squeeze_copy.dims": _as_view,
    "squeeze_copy.dim": _as_view,
    "squeeze_copy.default": _as_view,
    "unsqueeze_copy.default": _as_view,
    "select_copy.int": _select_as_slice,
    "split_with_sizes_copy.default": _pieces_as_slices,
    "split_copy.Tensor": _pieces_as_slices,
    "unbind_copy.int": _pieces_as_slices,
}
