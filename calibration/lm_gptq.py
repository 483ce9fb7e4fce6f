"""Data-aware weights for a decoder LM: GPTQ (Frantar et al., 2022) on calibration text, onto the grid of the
framework that will quantize them (edgekit.converters.lm_grids).

Round-to-nearest rounds each weight alone; GPTQ rounds one input column at a time and moves the error onto
the columns not yet rounded, weighted by the inverse Hessian of the layer's inputs (H = 2/N Σ x xᵀ over the
calibration tokens), so that the layer's outputs on text like the calibration text move least. Layers go
in order — each layer's q/k/v, then o, then gate/up, then down, then the LM head — and each one's Hessian
is taken with every earlier one already rounded. The scales are those the framework computes from the
original weights; no weight is moved beyond its group's largest magnitude (which stays as it was), so the
framework recomputes the same scales from the stored weights and its own round-to-nearest returns GPTQ's
values exactly. The LM head gets its own pass: the embedding table it may share keeps its values.
"""

from __future__ import annotations

from typing import Callable

DAMP = 0.01  # of the Hessian's mean diagonal, added to it (0.1 lost 0.5 points on the sample LM)
BLOCK = 128  # columns updated lazily together (the result is the same; the work is in matrix products)


class _Stop(Exception):
    """Raised by the last hook of a group: the rest of the forward pass is not needed."""


def sequence(module) -> list[list[str]]:
    """The groups of linears in the order they are rounded, by module name."""
    groups = []
    for i in range(len(module.model.layers)):
        p = f"model.layers.{i}."
        groups += [[p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"], [p + "self_attn.o_proj"],
                   [p + "mlp.gate_proj", p + "mlp.up_proj"], [p + "mlp.down_proj"]]
    return groups + [["lm_head"]]


def gptq_decoder(module, windows, grid_of: Callable, skip: Callable[[str], bool] = lambda name: False) -> int:
    """Round every linear of edgekit's static-cache decoder `module` (in place) by GPTQ on `windows` (token ids,
    windows × positions, at most the decoder's cache length each), each onto `grid_of(name, weight)`; the
    stored weights are those whose round-to-nearest on that grid is GPTQ's result. `skip(name)`: a linear kept
    float. Returns how many linears were rounded."""
    import torch

    done = 0
    with torch.no_grad():
        for group in sequence(module):
            linears = {n: module.get_submodule(n) for n in group if not skip(n)}
            if not linears:
                continue
            for name, H in _hessians(module, linears, windows).items():
                weight = linears[name].weight
                weight.copy_(_round(weight.data, H, grid_of(name, weight.data)).to(weight.dtype))
                done += 1
    return done


def _hessians(module, linears: dict, windows) -> dict:
    """2/N Σ x xᵀ of each linear's inputs over every calibration token (the forward stops after the group)."""
    import torch

    from edgekit.sources.lm_decoder import example_inputs  # local: the module defines torch modules

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
        for window in windows:
            tokens = torch.as_tensor(window, dtype=torch.int64)[None]
            try:
                module(tokens, torch.arange(tokens.shape[1]), *example_inputs(module.cfg, module.max_seq_len, 1)[2:])
            except _Stop:
                pass
    finally:
        for h in hooks:
            h.remove()
    return {n: h / max(count[0], 1) for n, h in H.items()}


def _round(weight, H, g: dict):
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
