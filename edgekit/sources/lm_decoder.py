"""The decoder edgekit exports: a Llama-style causal LM that reads a static KV cache and returns the new entries.

    logits, k_new, v_new = decoder(tokens[1, T], input_pos[T], k_cache, v_cache)

Each cache is one float32 tensor, layers × KV heads × `max_seq_len` × head size (`DecoderConfig.cache_shape`);
`input_pos` holds the absolute positions of the T tokens, consecutive. The same module is prefill (T = the
prefill length) and decode (T = 1). The call only reads the cache: its queries attend to the cache's
positions before `input_pos[0]` and to the T new keys side by side, and it returns the new keys and values
(layers × KV heads × T × head size), which the app writes into its cache at `input_pos`
(edgekit.targets.lm_cache). A call thus copies no cache (written inside the graph, it was rewritten whole
at every step and returned whole), and entries at later positions, left from an earlier text, are masked
out (any finite values: each is weighted by zero). RoPE's cos/sin are gathered from tables: elementwise ops,
gathers and matmuls every converter (litert-torch, ExecuTorch's XNNPACK lowering, the ONNX exporter) takes.
The weights are the folder's own, loaded from safetensors (no pickle); module names are Hugging Face's
(`model.layers.0.self_attn.q_proj`), so a weight's name reads the same in every report.
"""

from __future__ import annotations

import functools
from pathlib import Path

from edgekit.core.errors import BadInput
from edgekit.sources.lm_folder import DecoderConfig, weight_files

NORM_FORMS = ("inner", "divide")  # the RMS norm forms a runtime runs as one op (see RMSNorm.forward)


def load_weights(folder: Path) -> dict:
    """Every tensor of the folder's safetensors files, as float32 torch tensors (safetensors: no code runs)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    import torch

    state = {}
    for f in weight_files(folder):
        try:
            state.update(load_file(str(f)))
        except (SafetensorError, OSError, ValueError) as e:
            raise BadInput(f"{f} is not a readable safetensors file: {e}", fix="re-save the model (save_pretrained)") from None
    return {k: v.to(torch.float32) for k, v in state.items()}


def build_decoder(cfg: DecoderConfig, state: dict, max_seq_len: int, norm: str = "inner"):
    """The static-cache decoder of `cfg` with the weights `state` (Hugging Face names), in eval mode, its RMS
    norms in the form `norm` ("inner" or "divide", see RMSNorm)."""
    if not 1 <= max_seq_len <= cfg.max_positions:
        raise BadInput(f"--max-seq-len {max_seq_len} is outside the model's 1..{cfg.max_positions} positions",
                       fix=f"give --max-seq-len at most {cfg.max_positions}")
    model = _classes()["Decoder"](cfg, max_seq_len)
    state = dict(state)
    if cfg.tied:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)  # RoPE tables are not persistent: never missing
    unexpected = [u for u in unexpected if not u.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise BadInput(f"the weights do not fit a {cfg.architecture}: missing {missing[:3]}, unexpected {unexpected[:3]}",
                       fix="check that config.json belongs to these safetensors")
    if norm not in NORM_FORMS:
        raise ValueError(f"norm {norm!r} is not one of {NORM_FORMS}")
    rms_norm = _classes()["RMSNorm"]
    for m in model.modules():
        if isinstance(m, rms_norm):
            m.form = norm
    return model.eval()


def example_inputs(cfg: DecoderConfig, max_seq_len: int, tokens: int):
    """(tokens, input_pos, k_cache, v_cache) for `tokens` tokens from position 0, with empty caches."""
    import torch

    return (torch.zeros(1, tokens, dtype=torch.int64), torch.arange(tokens, dtype=torch.int64), *cfg.empty_caches(max_seq_len))


@functools.cache
def _classes() -> dict:
    """The decoder's nn.Module classes, made on first use (torch is imported only then)."""
    rms_norm = _rms_norm_class()
    return {"Decoder": _decoder_class(_layer_class(rms_norm), rms_norm), "RMSNorm": rms_norm}


def _rms_norm_class():
    """The RMSNorm module class."""
    import torch
    from torch import nn

    class RMSNorm(nn.Module):
        """x / RMS(x) × weight, in float32 as Hugging Face's, in the form its runtime runs as one op (`form`)."""

        def __init__(self, size: int, eps: float):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(size))
            self.eps = eps
            self.form = "inner"

        def forward(self, x):
            """x normalised by its root mean square over the last dimension, scaled. "inner": the mean is taken
            over the two inner dimensions of x² with a unit one added, the form XNNPACK's delegate takes (a 4-D
            mean over the inner dimensions); over the last one, every norm left the delegate and split the graph.
            "divide": x ÷ √(mean x² + ε) × weight, the pattern ONNX Runtime fuses into one
            SimplifiedLayerNormalization (it does not fuse the reciprocal square root)."""
            if self.form == "divide":
                return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
            square = x.pow(2).unsqueeze(-1)
            return x * torch.rsqrt(square.mean((-2, -1), keepdim=True).flatten(-2) + self.eps) * self.weight

    return RMSNorm


def _layer_class(norm_class):
    """The decoder layer's module class (attention, MLP), its norms of class `norm_class`."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        """Grouped-query attention over the static cache, the new keys and values written into it first."""

        def __init__(self, cfg: DecoderConfig):
            super().__init__()
            d, hd = cfg.hidden_size, cfg.head_dim
            self.q_proj = nn.Linear(d, cfg.heads * hd, bias=cfg.qkv_bias)
            self.k_proj = nn.Linear(d, cfg.kv_heads * hd, bias=cfg.qkv_bias)
            self.v_proj = nn.Linear(d, cfg.kv_heads * hd, bias=cfg.qkv_bias)
            self.o_proj = nn.Linear(cfg.heads * hd, d, bias=False)
            if cfg.qk_norm:
                self.q_norm = norm_class(hd, cfg.rms_eps)
                self.k_norm = norm_class(hd, cfg.rms_eps)
            self.cfg = cfg

        def forward(self, x, cos, sin, mask, k_cache, v_cache):
            """(the attention output, the T new keys and values): the queries attend to the cache's positions
            and to the new keys side by side, the mask choosing which; the cache itself is only read."""
            c, t = self.cfg, x.shape[1]
            q = self.q_proj(x).view(t, c.heads, c.head_dim).transpose(0, 1)  # heads × T × size
            k = self.k_proj(x).view(t, c.kv_heads, c.head_dim).transpose(0, 1)
            v = self.v_proj(x).view(t, c.kv_heads, c.head_dim).transpose(0, 1)
            if c.qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            group = c.heads // c.kv_heads  # the query heads sharing one KV head, side by side in its rows
            q = q.reshape(c.kv_heads, group * t, c.head_dim)
            scores = torch.cat((torch.bmm(q, k_cache.transpose(1, 2)), torch.bmm(q, k.transpose(1, 2))), dim=-1)
            weights = torch.softmax(scores * (c.head_dim ** -0.5) + mask, dim=-1)
            positions = k_cache.shape[1]
            out = torch.bmm(weights[..., :positions], v_cache) + torch.bmm(weights[..., positions:], v)
            out = out.reshape(c.heads, t, c.head_dim).transpose(0, 1).reshape(1, t, c.heads * c.head_dim)
            return self.o_proj(out), k, v

    class MLP(nn.Module):
        """SwiGLU: down(silu(gate(x)) × up(x))."""

        def __init__(self, cfg: DecoderConfig):
            super().__init__()
            self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
            self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
            self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

        def forward(self, x):
            """The feed-forward block's output."""
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        """One pre-norm decoder layer: attention and MLP, each added to the residual stream."""

        def __init__(self, cfg: DecoderConfig):
            super().__init__()
            self.input_layernorm = norm_class(cfg.hidden_size, cfg.rms_eps)
            self.self_attn = Attention(cfg)
            self.post_attention_layernorm = norm_class(cfg.hidden_size, cfg.rms_eps)
            self.mlp = MLP(cfg)

        def forward(self, x, *attention_args):
            """(the residual stream after this layer, its keys, its values)."""
            h, k_cache, v_cache = self.self_attn(self.input_layernorm(x), *attention_args)
            x = x + h
            return x + self.mlp(self.post_attention_layernorm(x)), k_cache, v_cache

    return Layer


def _decoder_class(layer_class, norm_class):
    """The whole decoder's module class, its layers of class `layer_class`."""
    import torch
    from torch import nn

    class Body(nn.Module):
        """Hugging Face's `model.*` tree: the embedding, the layers, the final norm."""

        def __init__(self, cfg: DecoderConfig):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.layers = nn.ModuleList(layer_class(cfg) for _ in range(cfg.layers))
            self.norm = norm_class(cfg.hidden_size, cfg.rms_eps)

    class Decoder(nn.Module):
        """Hugging Face's module tree (model.*, lm_head) reading a static cache, returning the new entries."""

        def __init__(self, cfg: DecoderConfig, max_seq_len: int):
            super().__init__()
            self.cfg, self.max_seq_len = cfg, max_seq_len
            self.model = Body(cfg)
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
            # RoPE as Hugging Face computes it (float32 inverse frequencies times float32 positions), as tables
            inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim))
            freqs = torch.arange(max_seq_len, dtype=torch.float32)[:, None] * inv_freq[None, :]
            angles = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("rope_cos", angles.cos(), persistent=False)
            self.register_buffer("rope_sin", angles.sin(), persistent=False)

        def forward(self, tokens, input_pos, k_cache, v_cache):
            """(logits for each of the T tokens, their keys and values: layers × KV heads × T × size each)."""
            c = self.cfg
            cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]  # T × size
            positions = torch.arange(self.max_seq_len, dtype=torch.int64)
            written = positions[None, :] < input_pos[:1, None]  # 1 × positions: the cache before this call
            causal = input_pos[None, :] <= input_pos[:, None]  # T × T: a new token sees those up to its own
            seen = torch.cat((written.expand(causal.shape[0], -1), causal), dim=-1)
            mask = torch.where(seen, 0.0, float("-inf")).repeat(c.heads // c.kv_heads, 1)
            x = self.model.embed_tokens(tokens)
            keys, values = [], []
            for i, layer in enumerate(self.model.layers):
                x, k, v = layer(x, cos, sin, mask, k_cache[i], v_cache[i])
                keys.append(k)
                values.append(v)
            return self.lm_head(self.model.norm(x)), torch.stack(keys), torch.stack(values)

    return Decoder


def _rope(x, cos, sin):
    """x rotated by the positions' angles (rotary position embedding, Hugging Face's half-split form)."""
    import torch

    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
