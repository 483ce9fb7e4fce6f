"""A decoder LM folder opened as a source: its config, its weights, its tokenizer, the reference it is
judged against, and the static-cache decoder every LM converter exports.

The reference is the model as its own framework runs it: Hugging Face `transformers` builds the
folder's architecture (never the author's code: `trust_remote_code` stays off, weights from safetensors
only) and scores a whole window in one forward pass. The decoder edgekit exports is a separate module
(edgekit.sources.lm_decoder) that reads the same weights: an fp32 artifact agreeing with the reference
token for token proves that module as well as the converter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import require
from edgekit.core.errors import BadInput
from edgekit.core.signature import Signature, TensorSpec
from edgekit.sources.lm_folder import TOKENIZER, DecoderConfig, weight_files

DEFAULT_MAX_SEQ_LEN = 256
DEFAULT_PREFILL_LEN = 32


class LMSource:
    """An opened decoder LM folder: `config`, `max_seq_len`, `prefill_len`, `decoder()`, `reference_logits`,
    `tokenize`. Its artifact's signature is the decode entry point's (tokens, input_pos, k_cache, v_cache)."""

    def __init__(self, location: str, max_seq_len: int | None = None, prefill_len: int | None = None):
        from edgekit.sources.lm_decoder import load_weights  # local: the module imports torch's weights reader

        require("lm", "opening a decoder LM folder")
        self.folder = Path(location)
        self.config = DecoderConfig.read(self.folder)
        self.max_seq_len = max_seq_len or min(self.config.max_positions, DEFAULT_MAX_SEQ_LEN)
        self.prefill_len = prefill_len or min(DEFAULT_PREFILL_LEN, self.max_seq_len - 1)
        if not 1 <= self.prefill_len < self.max_seq_len:
            raise BadInput(f"--prefill-len {self.prefill_len} must be at least 1 and below --max-seq-len {self.max_seq_len}",
                           fix="give a shorter --prefill-len or a longer --max-seq-len")
        self.state = load_weights(self.folder)
        self._reference = None
        cache = self.config.cache_shape(self.max_seq_len)
        new = (*cache[:2], 1, cache[3])  # one token's keys and values, per layer and KV head
        signature = Signature((TensorSpec("tokens", (1, 1), "int64"), TensorSpec("input_pos", (1,), "int64"),
                               TensorSpec("k_cache", cache, "float32"), TensorSpec("v_cache", cache, "float32")),
                              (TensorSpec("logits", (1, 1, self.config.vocab_size), "float32"),
                               TensorSpec("k_new", new, "float32"), TensorSpec("v_new", new, "float32")))
        files = [*weight_files(self.folder), self.folder / "config.json"]
        files += [self.folder / TOKENIZER] if (self.folder / TOKENIZER).is_file() else []
        self.artifact = ModelArtifact("hf-causal-lm", str(self.folder), signature, files=tuple(map(str, files)))

    def decoder(self, norm: str = "inner"):
        """A fresh static-cache decoder with the folder's weights (converters quantize it in place), its RMS
        norms in the form its runtime fuses (edgekit.sources.lm_decoder.build_decoder)."""
        from edgekit.sources.lm_decoder import build_decoder  # local: the module defines torch modules

        return build_decoder(self.config, self.state, self.max_seq_len, norm)

    def example_inputs(self, tokens: int) -> tuple:
        """(tokens, input_pos, k_cache, v_cache) for `tokens` tokens from position 0, with empty caches."""
        from edgekit.sources.lm_decoder import example_inputs  # local: the module builds torch tensors

        return example_inputs(self.config, self.max_seq_len, tokens)

    def tokenize(self, text: str) -> np.ndarray:
        """The token ids of `text` by the folder's tokenizer.json; BadInput when there is none."""
        path = self.folder / TOKENIZER
        if not path.is_file():
            raise BadInput(f"{self.folder} has no {TOKENIZER} to read text with",
                           fix="give --eval a .npz of token ids (an int array named 'tokens')")
        from tokenizers import Tokenizer

        return np.asarray(Tokenizer.from_file(str(path)).encode(text).ids, dtype=np.int64)

    def reference_logits(self, windows: np.ndarray) -> np.ndarray:
        """The source's logits for each window of token ids (windows × positions × vocabulary), float32,
        from its framework's own model on one thread."""
        import torch

        model = self._reference_model()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                return np.stack([model(torch.from_numpy(w[None])).logits[0].numpy() for w in windows])
        finally:
            torch.set_num_threads(threads)

    def reference_generate(self, prompt: np.ndarray, count: int) -> np.ndarray:
        """The source's `count` greedy tokens after `prompt`."""
        import torch

        with torch.no_grad():
            out = self._reference_model().generate(torch.from_numpy(prompt[None]), max_new_tokens=count, do_sample=False,
                                                   min_new_tokens=count, pad_token_id=0)
        return out[0, len(prompt):].numpy()

    def _reference_model(self):
        if self._reference is None:
            import torch
            import transformers

            config = transformers.AutoConfig.from_pretrained(self.folder, trust_remote_code=False, local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=False, dtype=torch.float32)
            missing = [m for m in model.load_state_dict(self.state, strict=False).missing_keys
                       if not (self.config.tied and m == "lm_head.weight")]
            if missing:
                raise BadInput(f"{self.folder}: the weights lack {missing[:3]}", fix="copy every safetensors file")
            model.tie_weights()
            self._reference = model.eval()
        return self._reference
