"""A Hugging Face causal language model folder, read safely: `config.json`, safetensors weights and, where
there is one, `tokenizer.json`.

No pickle is read and no code of the model's author runs (`trust_remote_code` is never set): the
architecture must be one edgekit builds itself (`ARCHITECTURES`: Llama-style decoders — RMSNorm, RoPE,
grouped-query attention, SwiGLU — and the Qwen2/Qwen3 variants of them). Everything here reads files only;
the torch module built from a folder is `edgekit.sources.lm_decoder`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import BadInput

# architecture (config.json "architectures") → what differs from Llama: bias on q/k/v, RMSNorm on q and k
ARCHITECTURES = {
    "LlamaForCausalLM": {"qkv_bias": False, "qk_norm": False},
    "MistralForCausalLM": {"qkv_bias": False, "qk_norm": False},
    "Qwen2ForCausalLM": {"qkv_bias": True, "qk_norm": False},
    "Qwen3ForCausalLM": {"qkv_bias": False, "qk_norm": True},
}
WEIGHTS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"


def is_lm_folder(path: Path) -> bool:
    """Whether `path` is a folder holding a model config and safetensors weights (detection, by content)."""
    return (path / "config.json").is_file() and ((path / WEIGHTS).is_file() or (path / SHARD_INDEX).is_file())


@dataclass(frozen=True)
class DecoderConfig:
    """The shape of a decoder LM as edgekit builds it, read from a folder's `config.json`."""

    architecture: str
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    rope_theta: float
    tied: bool
    qkv_bias: bool
    qk_norm: bool
    max_positions: int
    eos_ids: tuple[int, ...] = ()

    @classmethod
    def read(cls, folder: Path) -> "DecoderConfig":
        """The folder's config; BadInput naming the file for an unreadable one or an architecture edgekit
        does not build (with the ones it does)."""
        path = folder / "config.json"
        try:
            d = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BadInput(f"{path} is not a readable JSON config: {e}", fix="re-save the model (save_pretrained)") from None
        arch = (d.get("architectures") or ["?"])[0]
        if arch not in ARCHITECTURES:
            raise BadInput(f"{path}: architecture {arch!r} is not a decoder edgekit builds",
                           fix=f"edgekit builds {', '.join(ARCHITECTURES)}; edgekit never runs a model's own code")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise BadInput(f"{path}: RoPE scaling {kind!r} is not built yet", fix="use a model with default RoPE")
        try:
            heads = int(d["num_attention_heads"])
            hidden = int(d["hidden_size"])
            eos = d.get("eos_token_id")
            return cls(arch, int(d["vocab_size"]), hidden, int(d["num_hidden_layers"]), heads,
                       int(d.get("num_key_value_heads") or heads), int(d.get("head_dim") or hidden // heads),
                       int(d["intermediate_size"]), float(d.get("rms_norm_eps", 1e-6)),
                       float(rope.get("rope_theta", d.get("rope_theta", 10000.0))), bool(d.get("tie_word_embeddings", False)),
                       bool(d.get("attention_bias", ARCHITECTURES[arch]["qkv_bias"])), ARCHITECTURES[arch]["qk_norm"],
                       int(d.get("max_position_embeddings", 2048)),
                       tuple(eos if isinstance(eos, list) else [eos]) if eos is not None else ())
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"{path}: missing or malformed field {e}", fix="re-save the model (save_pretrained)") from None

    def cache_shape(self, max_seq_len: int) -> tuple[int, int, int, int]:
        """One of the two cache tensors (keys, values): layers × KV heads × positions × head size."""
        return (self.layers, self.kv_heads, max_seq_len, self.head_dim)

    def empty_caches(self, max_seq_len: int) -> tuple:
        """The two cache tensors (keys, values) of a forward from position 0, zeros, as torch tensors."""
        import torch

        cache = torch.zeros(self.cache_shape(max_seq_len))
        return cache, cache.clone()

    def cache_bytes(self, max_seq_len: int) -> int:
        """Both cache tensors in float32."""
        layers, heads, positions, size = self.cache_shape(max_seq_len)
        return 2 * 4 * layers * heads * positions * size


def weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files: one file, or the shards its index names (each checked to be inside it)."""
    if (folder / WEIGHTS).is_file():
        return [folder / WEIGHTS]
    index = folder / SHARD_INDEX
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise BadInput(f"{index} is not a readable shard index: {e}", fix="re-save the model (save_pretrained)") from None
    files = [folder / n for n in names]
    for f in files:
        if f.resolve().parent != folder.resolve() or not f.is_file():
            raise BadInput(f"{index} names {f.name!r}, which is not a file in {folder}", fix="copy every shard")
    return files
