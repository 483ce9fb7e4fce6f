"""Data-aware weights for a decoder LM: GPTQ (Frantar et al., 2022) on calibration text, onto the grid of the
framework that will quantize them (edgekit.converters.lm_grids).

Round-to-nearest rounds each weight alone; GPTQ rounds one input column at a time and moves the error onto
the columns not yet rounded, weighted by the inverse Hessian of the layer's inputs (H = 2/N Σ x xᵀ over the
calibration tokens), so that the layer's outputs on text like the calibration text move least. Layers go
in order — each layer's q/k/v, then o, then gate/up, then down, then the LM head — and each one's Hessian
is taken with every earlier one already rounded (each layer run on its inputs as kept from the layer before,
so a layer's work is done once per group of its linears, not a forward pass from the embedding up). The
scales are those the framework computes from the original weights; no weight is moved beyond its group's
largest magnitude (which stays as it was), so the framework recomputes the same scales from the stored
weights and its own round-to-nearest returns GPTQ's values exactly. The LM head gets its own pass: the embedding table it may share keeps its values.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

DAMP = 0.01  # of the Hessian's mean diagonal, added to it (0.1 lost 0.5 points on the sample LM)
BLOCK = 128  # columns updated lazily together (the result is the same; the work is in matrix products)


class _Stop(Exception):
    """Raised by the last hook of a group: the rest of the forward pass is not needed."""


def _layer_groups(i: int) -> list[list[str]]:
    p = f"model.layers.{i}."
    return [[p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"], [p + "self_attn.o_proj"],
            [p + "mlp.gate_proj", p + "mlp.up_proj"], [p + "mlp.down_proj"]]


def gptq_decoder(module, windows, grid_of: Callable, skip: Callable[[str], bool] = lambda name: False) -> int:
    """Round every linear of edgekit's static-cache decoder `module` (in place) by GPTQ on `windows` (token ids,
    windows × positions, at most the decoder's cache length each), each onto `grid_of(name, weight)`; the
    stored weights are those whose round-to-nearest on that grid is GPTQ's result. `skip(name)`: a linear kept
    float. Returns how many linears were rounded.

    The decoder runs once up to its first layer; each layer then runs on its inputs, kept (once per group of
    its linears, the hooks stopping it after the group), and its outputs, with all its linears rounded, are the
    next layer's inputs: a layer's work is done once per group, not a whole forward pass up to it."""
    import torch

    done = 0
    with torch.no_grad():
        xs, args = _first_layer_inputs(module, windows)
        for i, layer in enumerate(module.model.layers):
            for group in _layer_groups(i):
                done += _round_group(module, group, skip, grid_of, [partial(layer, x, *a) for x, a in zip(xs, args)])
            xs = [layer(x, *a)[0] for x, a in zip(xs, args)]
        head = [partial(lambda x: module.lm_head(module.model.norm(x)), x) for x in xs]
        done += _round_group(module, ["lm_head"], skip, grid_of, head)
    return done


def _first_layer_inputs(module, windows) -> tuple[list, list]:
    """For each window, the first layer's input (the embedded tokens) and the rest of its arguments (RoPE,
    mask, cache writes and the layer's empty cache: the same for every layer of a forward from an empty
    cache)."""
    import torch

    xs, args = [], []

    def record(_mod, inputs):
        xs.append(inputs[0])
        args.append(inputs[1:])
        raise _Stop

    hook = module.model.layers[0].register_forward_pre_hook(record)
    try:
        for window in windows:
            tokens = torch.as_tensor(window, dtype=torch.int64)[None]
            try:
                module(tokens, torch.arange(tokens.shape[1]), *module.cfg.empty_caches(module.max_seq_len))
            except _Stop:
                pass
    finally:
        hook.remove()
    return xs, args


def _round_group(module, group: list[str], skip: Callable, grid_of: Callable, runs: list) -> int:
    """The linears of `group` (but the skipped) rounded by GPTQ, their Hessians taken while `runs` (a call per
    window) run; how many."""
    linears = {n: module.get_submodule(n) for n in group if not skip(n)}
    if not linears:
        return 0
    for name, H in _hessians(linears, runs).items():
        weight = linears[name].weight
        weight.copy_(gptq_round(weight.data, H, grid_of(name, weight.data)).to(weight.dtype))
    return len(linears)


def _hessians(linears: dict, runs: list) -> dict:
    """2/N Σ x xᵀ of each linear's inputs over every calibration token, `runs` running the model on them, a
    call per window (each stopped after the group)."""
    import torch

    H = {n: torch.zeros(m.in_features, m.in_features, dtype=torch.float64) for n, m in linears.items()}
    count, last = [0], list(linears)[-1]

    def hook(name):
        def record(_mod, inputs, _out):
            x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()
            H[name] += 2 * x.T @ x
            if name == last:
                count[0] += x.shape[0]
                raise _Stop
        return record

    hooks = [m.register_forward_hook(hook(n)) for n, m in linears.items()]
    try:
        for run in runs:
            try:
                run()
            except _Stop:
                pass
    finally:
        for h in hooks:
            h.remove()
    return {n: h / max(count[0], 1) for n, h in H.items()}


def gptq_round(weight, H, g: dict):
    """GPTQ's lazy-batch algorithm on `weight` (out × in) with the fixed scales of grid `g`: the weights to
    store (on the grid's rounding levels; each group's largest at its own value)."""
    import torch

    W = weight.double().clone()
    original = W.clone()
    cols, size = W.shape[1], g["group"]
    dead = torch.diag(H) == 0
    H = H.clone()
    H[dead, dead] = 1
    W[:, dead] = 0
    H += DAMP * torch.mean(torch.diag(H)) * torch.eye(cols, dtype=H.dtype)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    s, d, ext_k = g["s"].double(), g["d"].double(), g["ext_k"].double()
    levels, largest = torch.zeros_like(W), torch.zeros_like(W, dtype=torch.bool)
    for i1 in range(0, cols, BLOCK):
        i2 = min(i1 + BLOCK, cols)
        W1, err1, Hinv1 = W[:, i1:i2].clone(), torch.zeros_like(W[:, i1:i2]), Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            c = i1 + i
            gi, pos = c // size, c % size
            k = torch.clamp(torch.round(W1[:, i] / s[:, gi]), g["kmin"], g["kmax"])
            top = g["ext"][:, gi] == pos
            k = torch.where(top, ext_k[:, gi], k)
            levels[:, c], largest[:, c] = k, top
            err = (W1[:, i] - k * d[:, gi]) / Hinv1[i, i]
            W1[:, i:] -= err[:, None] @ Hinv1[i, i:][None, :]
            err1[:, i] = err
        W[:, i2:] -= err1 @ Hinv[i1:i2, i2:]
    scales = s.repeat_interleave(size, dim=1)
    return torch.where(largest, original, levels * scales).float()
