"""Each LM converter's weight grid, as its framework computes it, so that data-aware weights (GPTQ,
edgekit.calibration.lm_gptq) land on the values the framework's own round-to-nearest stores.

All three are symmetric, one scale per row and group of `group` input columns (group = the row's length for
per channel):

- ExecuTorch at int4 (torchao `Int8DynamicActivationIntxWeightConfig`): scale = max|w| / ((qmax − qmin) / 2),
  i.e. max|w| / 7.5, k = round(w × (1 / scale)) clamped to [−8, 7]; XNNPACK stores the group scales as
  bfloat16. At int8 (edgekit's weight-only linear, edgekit.converters.lm_to_pte) as LiteRT's int8.
- LiteRT (ai-edge-quantizer): scale = max|w| / qmax (7 or 127; int8 narrow range ±127), k = round(w / scale);
  blockwise (int4) scales rounded to bfloat16 and stored as float16.
- ONNX Runtime (`MatMulNBitsQuantizer`): scale = v / −2^(bits−1), v the signed value of largest magnitude, so
  that v itself is stored as −8 / −128; k in [−8, 7] / [−128, 127].

A grid gives, per row and group: `s`, what the quantizer divides by; `d`, what the runtime multiplies by (s,
re-rounded where the runtime stores it so); `kmin`, `kmax`, the levels another weight may take without
changing the quantizer's recomputed scale (none may exceed the group's largest magnitude); `ext`, the index
in the group of the weight that sets the scale (stored at its own value), and `ext_k` its level.
"""

from __future__ import annotations


def grid(fmt: str, bits: int, weight, group: int) -> dict:
    """The grid of `fmt`'s quantizer ("pte", "tflite", "onnx") at `bits` (4 or 8) for the float `weight`
    (out × in), in groups of `group` input columns."""
    import torch

    w = weight.float().reshape(weight.shape[0], weight.shape[1] // group, group)
    amax, ext = w.abs().max(dim=-1)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if fmt == "onnx":
        top, bottom = w.max(-1).values, w.min(-1).values
        signed = torch.where(top.abs() > bottom.abs(), top, bottom)
        s = signed / float(low)
        ext = torch.where(top.abs() > bottom.abs(), w.argmax(-1), w.argmin(-1))
        return {"s": s, "d": s, "kmin": low, "kmax": high, "ext": ext, "ext_k": torch.full_like(s, float(low)),
                "group": group}
    largest = w.gather(-1, ext[..., None])[..., 0]
    if fmt == "pte" and bits == 4:
        s = torch.clamp(amax / ((high - low) / 2), min=torch.finfo(torch.float32).smallest_normal)
        d = s.to(torch.bfloat16).float()
        ext_k = torch.clamp(torch.round(largest * (1.0 / s)), low, high)
    elif fmt == "tflite" or fmt == "pte":
        low = low if bits == 4 else -high  # int8: narrow range
        s = torch.clamp(amax, min=1e-9) / float(high)
        s = d = s.to(torch.bfloat16).to(torch.float16).float() if bits == 4 else s
        ext_k = torch.clamp(torch.round(largest / s), low, high)
    else:
        raise ValueError(f"no grid for {fmt}")
    return {"s": s, "d": d, "kmin": -high, "kmax": high, "ext": ext, "ext_k": ext_k, "group": group}
