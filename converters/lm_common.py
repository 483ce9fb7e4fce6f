"""What the decoder LM converters (lm_to_pte, lm_to_tflite, lm_to_onnx) share: the entry points they
export, the weights `--keep` holds back, the data-aware rounding `--calib` text asks for, and the record of
what was made (`ArtifactMeta.lm`).

Every LM artifact has the same two entry points, each (tokens, input_pos, k_cache, v_cache) → (logits,
k_new, v_new), the app writing the new keys and values into its cache (edgekit.sources.lm_decoder):
`prefill`, `prefill_len` tokens at once, and `decode`, one token. A format with one graph
for both (ONNX: the token count is a dynamic dimension) serves them from that graph.
"""

from __future__ import annotations

from edgekit.calibration.lm_gptq import gptq_decoder
from edgekit.converters.lm_grids import grid
from edgekit.core.errors import BadInput
from edgekit.core.quant import Fallback, Precision, unknown_layers

ENTRY_POINTS = ("prefill", "decode")


def entry_points(source) -> dict[str, tuple]:
    """Each entry point's example inputs, empty caches."""
    return {"prefill": source.example_inputs(source.prefill_len), "decode": source.example_inputs(1)}


def kept(spec, module) -> tuple[str, ...]:
    """The module names `--keep` holds at float (a name keeps every linear and embedding under it);
    BadInput naming the model's top-level parts for a name it does not have."""
    names = tuple(o.layer for o in spec.overrides)
    if any(o.precision != Fallback.FLOAT for o in spec.overrides):
        raise BadInput("a decoder LM keeps weights only at float", fix="write --keep NAME (e.g. --keep lm_head)")
    known = {n for n, _ in module.named_modules() if n}
    missing = [n for n in names if n not in known]
    if missing:
        raise unknown_layers(missing, {n for n in known if n.count(".") <= 3}, "the decoder")
    return names


def is_kept(name: str, keep: tuple[str, ...]) -> bool:
    """Whether the module `name` is, or lies under, a kept name."""
    return any(name == k or name.startswith(k + ".") for k in keep)


def weights_text(precision: str, group_size: int | None, int8: str = "int8 per channel", int4: str = "groups") -> str:
    """How a converter stored its linears' weights at `precision`, in the words of the JSON's `lm.weights`."""
    return {"fp32": "float32", "int8-weights": int8, "int4-weights": f"int4 in {int4} of {group_size}"}[precision]


def record(source, precision: str, *, weights: str, activations: str, embedding: str, head: str,
           keep: tuple[str, ...] = (), group_size: int | None = None, rounding: str = "round to nearest") -> dict:
    """`ArtifactMeta.lm`: the cache, the entry points and what each group of weights was made (`head`: the LM
    head's; `rounding`: how the linears' weights were rounded, as `data_aware` says)."""
    cfg = source.config
    return {"architecture": cfg.architecture, "max_seq_len": source.max_seq_len, "prefill_len": source.prefill_len,
            "entry_points": list(ENTRY_POINTS), "cache_shape": list(cfg.cache_shape(source.max_seq_len)),
            "cache_bytes": cfg.cache_bytes(source.max_seq_len), "precision": precision,
            "weights": {"linear": weights, "embedding": embedding, "lm_head": head, "kept_float": list(keep),
                        "rounding": rounding},
            "activations": activations, **({"group_size": group_size} if group_size else {})}


TIED = ("model.embed_tokens", "lm_head")  # one table when the config ties the head to the embedding


def keeps_tied_table(cfg, keep: tuple[str, ...]) -> bool:
    """Whether `keep` holds float the table a tied LM head and the embedding share (naming either of them)."""
    return cfg.tied and any(is_kept(n, keep) for n in TIED)


def data_aware(module, ctx, fmt: str, precision: str, group: int | None, keep: tuple[str, ...],
               shared_head: bool = False, head_group: int | None = None) -> str:
    """With calibration text (`ctx.calibration`), the decoder's linears rounded by GPTQ onto `fmt`'s grid at
    `precision` (groups of `group` input columns; None: per channel), in place, before the framework quantizes
    them; what `record` calls the rounding. `shared_head`: the format stores a tied LM head as the embedding's
    table, once; the head is then left as the table (rounding it apart would store a second table).
    The LM head is int8 in every format at both precisions: its grid is int8, per channel or in groups of
    `head_group` input columns."""
    if precision == Precision.FP32 or ctx.calibration is None:
        return "round to nearest"
    bits = 4 if precision == Precision.INT4_WEIGHTS else 8
    tied = shared_head and ctx.source.config.tied

    def grid_of(name, w):
        if name == "lm_head":
            return grid(fmt, 8, w, head_group or w.shape[1])
        return grid(fmt, bits, w, group or w.shape[1])

    done = gptq_decoder(module, ctx.calibration, grid_of, skip=lambda name: is_kept(name, keep) or (tied and name == "lm_head"))
    head = "the LM head rounded to nearest as the embedding's table" if tied else "the LM head its own"
    return f"GPTQ on {len(ctx.calibration)} windows of calibration text ({done} linears; {head})"
