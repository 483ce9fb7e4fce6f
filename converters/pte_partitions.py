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
ops decomposed (`unrolled`), an `nn.LSTM`'s or `nn.GRU`'s by edgekit's own decomposition (`_recurrence`):
per layer and direction each gate's input projection is one linear over the sequence, and per step a row of
each plus a linear of the hidden state for each gate, their sigmoid/tanh, products and sums. Nothing is
split, so every op of a step is one XNNPACK takes and the int8 steps lower as one partition, as at fp32. Its
per-gate weights are parameters of their own (`_own_weights`).

Two things torch's own decomposition does that read wrong at int8 once the steps share a partition, and
which this one avoids:
  * a bias shared by the steps' linears (its hidden-state linear's, every step): XNNPACK serializes a
    linear's bias as int32 at the scale of that linear's input, once per bias node, so every step after
    the first read it at the first step's scale (steps' linears keeping their biases: off by up to 0.07
    from the PT2E graph one step in, on a 1-layer LSTM). Here the biases are in the sequence's projection,
    made once; the hidden-state linears have none.
  * a `sub` (the GRU's (h - n) * z + n), which XNNPACKQuantizer does not annotate: reading a dequantized h
    and a float tanh, XNNPACK takes it for an int8 sub. Here h' = (1 - z) n + z h, 1 - z = sigmoid(-a_z).
With torch's decomposition the int8 gates were split after one linear, and that split, moved into XNNPACK
as slices, read wrong (cosine 0.957 to its own PT2E graph): likely the shared bias above, which only showed
once the slices joined the steps into one partition (an nn.RNN's steps, with no split, were one partition
with a shared bias: not measured). `nn.RNN` is unrolled the same way. Other recurrent ops (the cells, an
LSTM with projections, an unbatched input) still take torch's decomposition and lower as before.

Only a graph holding a recurrent layer is touched (`is_recurrent`): any other model lowers exactly as
before, its .pte byte for byte the same.
"""

from __future__ import annotations

import functools
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


def recurrent_steps(program) -> list[tuple[str, str, int]]:
    """The recurrent ops of `program` (an ATen ExportedProgram) and how many steps each unrolls into:
    [(its layer's module path, its op, steps)], a layer's steps being the sequence's length × its layers ×
    its directions (a cell: 1)."""
    ops = {f"aten.{name}" for name in RECURRENT_OPS}
    found = []
    for node in program.graph.nodes:
        if node.op != "call_function" or str(node.target) not in ops:
            continue
        stack = node.meta.get("nn_module_stack") or {}
        layer = list(stack.values())[-1][0] if stack else ""
        op = str(node.target).split(".")[1]
        steps = 1
        if str(node.target).endswith(".input"):  # (input, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first)
            shape = node.args[0].meta["val"].shape
            time = 1 if node.args[8] and len(shape) == 3 else 0
            steps = int(shape[time]) * int(node.args[4]) * (2 if node.args[7] else 1)
        found.append((layer, op, steps))
    return found


def unrolled(program):
    """`program` (an ATen ExportedProgram) with its recurrent ops decomposed into their steps and nothing
    else decomposed (a `linear` stays a `linear`): an LSTM's, GRU's or RNN's by `_recurrence`, the others by
    torch's decompositions; made once per program."""
    import torch

    found = _unrolled.get(program)
    if found is None:
        every = torch.export.default_decompositions()
        ops = [getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1]) for name in RECURRENT_OPS]
        present = {n.target for n in program.graph.nodes if n.op == "call_function"}
        table = {op: every[op] for op in ops if op in present}
        ours = {torch.ops.aten.lstm.input: _lstm_input, torch.ops.aten.gru.input: _gru_input,
                torch.ops.aten.rnn_tanh.input: functools.partial(_rnn_input, "rnn_tanh"),
                torch.ops.aten.rnn_relu.input: functools.partial(_rnn_input, "rnn_relu")}
        table.update({op: fn for op, fn in ours.items() if op in table})
        found = _unrolled[program] = _own_weights(program.run_decompositions(table)) if table else program
    return found


def _folded():
    import torch

    aten = torch.ops.aten
    return (aten.slice.Tensor, aten.neg.default, aten.add.Tensor)


def _own_weights(program):
    """`program` with every slice of a parameter (the gates' weights and biases `_recurrence` cuts out of the
    stacked ones, their negations and sums) a parameter of its own: XNNPACK takes a linear whose weight and
    bias are parameters, not ops computing them (a linear with a sliced bias was left to the portable
    kernels as addmm), and PT2E quantizes such a parameter as any linear's weight. A stacked parameter
    nothing else reads is dropped."""
    import torch
    from torch._guards import detect_fake_mode
    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

    signature, graph = program.graph_signature, program.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    names = signature.inputs_to_parameters  # placeholder name → the parameter's name
    values = {n: program.state_dict[names[n.name]] for n in placeholders if n.name in names}
    roots = {n: names[n.name] for n in values}  # the parameter each value is cut from
    for node in graph.nodes:
        inputs = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]
        if node.op == "call_function" and node.target in _folded() and inputs and all(a in values for a in inputs):
            args, kwargs = torch.utils._pytree.tree_map_only(torch.fx.Node, values.get, (node.args, node.kwargs))
            with torch.no_grad():
                values[node] = node.target(*args, **kwargs)
            roots[node] = roots[inputs[0]]
    cut = [n for n in values if n.op != "placeholder" and any(u not in values for u in n.users)]
    if not cut:
        return program
    fake = detect_fake_mode(tuple(n.meta["val"] for n in placeholders))
    specs = {s.arg.name: s for s in signature.input_specs}
    last = max((n for n in placeholders if n.name in names), key=placeholders.index)
    taken = set(program.state_dict)
    for node in cut:
        fqn = next(f"{roots[node]}_{k}" for k in range(len(taken) + 1) if f"{roots[node]}_{k}" not in taken)
        taken.add(fqn)
        with graph.inserting_after(last):
            new = last = graph.placeholder("p_" + fqn.replace(".", "_"))
        new.meta.update(node.meta)
        new.meta["val"] = fake.from_tensor(values[node], static_shapes=True)
        # a copy: a view of the stacked tensor would carry (and serialize) all of it
        program.state_dict[fqn] = torch.nn.Parameter(values[node].clone().contiguous(), requires_grad=False)
        specs[new.name] = InputSpec(InputKind.PARAMETER, TensorArgument(new.name), fqn, None)
        node.replace_all_uses_with(new)
    graph.eliminate_dead_code()
    for node in placeholders:
        if node.name in names and not node.users:
            program.state_dict.pop(names[node.name])
            graph.erase_node(node)
    signature.input_specs = [specs[n.name] for n in graph.nodes if n.op == "placeholder"]
    graph.lint()
    program.graph_module.recompile()
    return program


def _gates(tensor, gates: int):
    """A stacked weight or bias (torch's gates one after another along its rows) cut into its gates."""
    size = tensor.shape[0] // gates
    return [tensor[g * size:(g + 1) * size] for g in range(gates)]


def _project(pieces, weight, bias):
    """linear(cat(pieces, -1), weight, bias) without the cat: one linear per piece of the input (a
    bidirectional layer's directions), on the weight's columns for it."""
    import torch.nn.functional as F

    out, start = None, 0
    for piece in pieces:
        width = piece.shape[-1]
        part = F.linear(piece, weight[:, start:start + width], bias if out is None else None)
        out, start = part if out is None else out + part, start + width
    return out


def _recurrence(input, states, params, has_biases, num_layers, bidirectional, batch_first, kind):
    """aten.lstm.input / aten.gru.input / aten.rnn_tanh.input / aten.rnn_relu.input (`kind` "lstm", "gru",
    "rnn_tanh", "rnn_relu") with inference's arguments, unrolled with no split and no bias shared between
    steps: (its output, each layer and direction's last state, an LSTM's as (h, c))).

    Per layer and direction, each gate's input projection is one linear over the whole sequence, both of
    the gate's biases in it (the GRU's candidate gate keeps its hidden bias, which r scales, as an add); a
    step reads its row of each and adds its own bias-free linear of the hidden state. XNNPACK quantizes a
    linear's bias to int32 with the scale of that linear's input, once per bias it is given: a bias shared by
    the steps' linears, as in torch's own decomposition, is right for the first step only once the steps are
    one partition. A bidirectional layer's input stays two sequences, the weight's columns cut for each.

    The states are [1, batch, hidden] (a row [batch, hidden] added to them broadcasts), so that a direction's
    output is the `cat` of its steps' states as they are: an unsqueeze between a state and the cat would be
    a move of int8 values (`_share_qparams`) under other parameters than the cat's, which XNNPACK refuses."""
    import torch

    time = 1 if batch_first else 0
    steps = input.shape[time]
    layout, pieces = time, [input]  # the layer's input: pieces along the features, their time dimension
    directions = 2 if bidirectional else 1
    group = 4 if has_biases else 2
    n_gates = {"lstm": 4, "gru": 3}.get(kind, 1)
    finals = []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            k = layer * directions + d
            w_ih, w_hh = params[k * group], params[k * group + 1]
            b_ih, b_hh = (params[k * group + 2], params[k * group + 3]) if has_biases else (None, None)
            wi, wh = _gates(w_ih, n_gates), _gates(w_hh, n_gates)
            bi = _gates(b_ih, n_gates) if has_biases else [None] * n_gates
            bh = _gates(b_hh, n_gates) if has_biases else [None] * n_gates
            both = [None if b is None else b + c for b, c in zip(bi, bh)]
            if kind != "gru":
                seq = [_project(pieces, wi[g], both[g]) for g in range(n_gates)]
            else:  # r, z, n, then -z's pre-activation for 1 - z = sigmoid(-a_z)
                seq = [_project(pieces, wi[0], both[0]), _project(pieces, wi[1], both[1]),
                       _project(pieces, wi[2], bi[2]), _project(pieces, -wi[1], None if both[1] is None else -both[1])]
            state = states(k)
            out = [None] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                rows = [s.select(layout, t) for s in seq]
                if kind == "lstm":
                    state = _lstm_step(rows, state, wh)
                elif kind == "gru":
                    state = _gru_step(rows, state, wh, bh[2])
                else:  # an Elman RNN: tanh or relu of the row plus the hidden state's linear
                    state = rows[0] + torch.nn.functional.linear(state, wh[0])
                    state = state.tanh() if kind == "rnn_tanh" else state.relu()
                out[t] = state[0] if kind == "lstm" else state
            outputs.append(out)
            finals.append(state)
        layout, pieces = 0, [torch.cat(out, 0) for out in outputs]
    output = torch.cat(pieces, -1) if len(pieces) > 1 else pieces[0]
    return (output.transpose(0, 1) if batch_first else output), finals


def _lstm_step(rows, state, wh):
    """One LSTM step (gate order i, f, g, o): each gate its row of the input projection plus its own
    linear of h."""
    import torch.nn.functional as F

    h, c = state
    i, f, g, o = (row + F.linear(h, w) for row, w in zip(rows, wh))
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(rows, h, wh, b_hn):
    """One GRU step (gate order r, z, n; n's hidden bias inside r * (…)), with no subtraction:
    h' = (1 - z) n + z h, 1 - z = sigmoid(-a_z) from the negated weights. XNNPACKQuantizer annotates no `sub`:
    torch's (h - n) * z + n leaves a sub reading a dequantized h and a float tanh, which XNNPACK takes for an
    int8 sub and misreads."""
    import torch.nn.functional as F

    r = (rows[0] + F.linear(h, wh[0])).sigmoid()
    z = (rows[1] + F.linear(h, wh[1])).sigmoid()
    keep = (rows[3] + F.linear(h, -wh[1])).sigmoid()
    hidden = F.linear(h, wh[2])
    n = (rows[2] + r * (hidden if b_hn is None else hidden + b_hn)).tanh()
    return keep * n + z * h


def _lstm_input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten.lstm.input unrolled by `_recurrence`; torch's own decomposition for what it does not cover
    (projections, training, an unbatched input)."""
    import torch
    from torch._decomp import decompositions

    h0, c0 = hx
    if train or h0.shape[-1] != c0.shape[-1] or input.dim() != 3:
        return decompositions.lstm_impl(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                        batch_first)
    output, finals = _recurrence(input, lambda k: (h0[k:k + 1], c0[k:k + 1]), params, has_biases, num_layers,
                                 bidirectional, batch_first, "lstm")
    return output, torch.cat([h for h, _ in finals]), torch.cat([c for _, c in finals])


def _gru_input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten.gru.input unrolled by `_recurrence`; torch's own decomposition for what it does not cover
    (training, an unbatched input)."""
    import torch
    from torch._decomp import decompositions

    if train or input.dim() != 3:
        return decompositions.gru_impl(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                       batch_first)
    output, finals = _recurrence(input, lambda k: hx[k:k + 1], params, has_biases, num_layers, bidirectional,
                                 batch_first, "gru")
    return output, torch.cat(finals)


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


def _rnn_input(kind, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten.rnn_tanh.input / aten.rnn_relu.input (`kind`) unrolled by `_recurrence`; torch's own
    decomposition for what it does not cover (training, an unbatched input)."""
    import torch
    from torch._decomp import decompositions

    if train or input.dim() != 3:
        default = decompositions.rnn_tanh_input if kind == "rnn_tanh" else decompositions.rnn_relu_input
        return default(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    output, finals = _recurrence(input, lambda k: hx[k:k + 1], params, has_biases, num_layers, bidirectional,
                                 batch_first, kind)
    return output, torch.cat(finals)
