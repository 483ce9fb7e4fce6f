"""Train the bundled tiny language model: a ~3 M-parameter Llama on Python's own help() text.

    python sample_models/train_tiny_lm.py      # ~15-18 min on one CPU thread, seeded

The text is CPython's `pydoc_data.topics.topics` (the reference pages behind help("assert") etc.),
so nothing is downloaded and nothing is random. Topics are taken in sorted order; every 10th
(index % 10 == 9) is held out, the rest are for training, joined with <|endoftext|>. The model is a
transformers LlamaForCausalLM (GQA, RoPE, RMSNorm, SwiGLU, tied embeddings) with a 1024-token
byte-level BPE trained on the same training text. The exact text depends on the Python version
(3.11 here), so rerunning under another version gives a similar but not identical model.
It is trained on 256-token windows: positions 256-511 are allowed by the config but untrained,
so feed it at most 256 tokens at a time.

Writes, beside this script:
    tiny_lm/                 config.json, generation_config.json, model.safetensors (float16),
                             tokenizer.json (byte-level BPE, <|endoftext|> = bos = eos)
    tiny_lm_eval.txt         the first ~8000 characters of the held-out text, for verification
    tiny_lm_calib.txt        ~70,000 characters of the training text (every 3rd training topic), the
                             calibration text of `-p int4-weights --calib` (GPTQ); also written alone by
                             `python sample_models/train_tiny_lm.py --calib-text`
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
from pydoc_data.topics import topics
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

HERE = Path(__file__).resolve().parent
SEED = 0
EOT = "<|endoftext|>"
VOCAB, SEQ, BATCH = 1024, 256, 16
STEPS, WARMUP, LR = 600, 50, 3e-3
# One thread: the result does not depend on the machine's core count, and on a shared 2-core box
# it measured faster than two (~1.7 s a step against 2-7 s when other jobs compete for the cores).
THREADS = 1


def split_text() -> tuple[str, str]:
    """(train, held-out) text: sorted topics, every 10th held out, each part joined with EOT."""
    names = sorted(topics)
    train = [topics[n] for i, n in enumerate(names) if i % 10 != 9]
    held = [topics[n] for i, n in enumerate(names) if i % 10 == 9]
    return EOT.join(train), EOT.join(held)


def calibration_text(chars: int = 70_000) -> str:
    """Training-side text for calibration: every 3rd training topic (sorted, index % 3 == 1, never a held-out
    one), joined with EOT and cut at the last line end before `chars` characters."""
    names = sorted(topics)
    text = EOT.join(topics[n] for i, n in enumerate(names) if i % 3 == 1 and i % 10 != 9)
    return text[:text.rfind("\n", 0, chars) + 1]


def train_tokenizer(train_text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # lossless: no added space
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Train on the topics themselves so no merge spans the literal "<|endoftext|>".
    tok.train_from_iterator(train_text.split(EOT), trainer)
    return tok


def build_model(eot_id: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, intermediate_size=640, max_position_embeddings=512,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=eot_id, eos_token_id=eot_id, pad_token_id=eot_id,
    )
    return LlamaForCausalLM(config)


def lr_at(step: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, STEPS - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(model: LlamaForCausalLM, ids: torch.Tensor, held_ids: torch.Tensor) -> LlamaForCausalLM:
    decay = [p for p in model.parameters() if p.dim() >= 2]  # no weight decay on the RMSNorm gains
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(SEED)
    model.train()
    start = time.time()
    for step in range(STEPS):
        starts = torch.randint(0, len(ids) - SEQ, (BATCH,), generator=gen)
        batch = torch.stack([ids[s:s + SEQ] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=batch, labels=batch, use_cache=False).loss  # labels are shifted inside
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == STEPS - 1:
            held_loss = math.log(evaluate(model.eval(), held_ids)[0])
            model.train()
            print(f"step {step:5d}  loss {loss.item():.3f}  held-out {held_loss:.3f}  lr {lr_at(step):.2e}  "
                  f"{time.time() - start:5.0f} s", flush=True)
    return model.eval()


@torch.no_grad()
def evaluate(model: LlamaForCausalLM, ids: torch.Tensor, window: int = SEQ) -> tuple[float, float]:
    """(perplexity, greedy top-1 next-token accuracy) over consecutive non-overlapping windows."""
    nll, hits, count = 0.0, 0, 0
    for s in range(0, len(ids) - 1, window):
        chunk = ids[s:s + window + 1]
        logits = model(input_ids=chunk[None, :-1], use_cache=False).logits[0].float()
        target = chunk[1:]
        nll += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
        hits += int((logits.argmax(-1) == target).sum())
        count += len(target)
    return math.exp(nll / count), hits / count


def main(out_dir: Path = HERE) -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    folder = out_dir / "tiny_lm"
    folder.mkdir(parents=True, exist_ok=True)

    train_text, held_text = split_text()
    tok = train_tokenizer(train_text)
    assert tok.decode(tok.encode(held_text).ids, skip_special_tokens=False) == held_text, "BPE round trip"
    eot_id = tok.token_to_id(EOT)
    train_ids = torch.tensor(tok.encode(train_text).ids)
    held_ids = torch.tensor(tok.encode(held_text).ids)
    print(f"text: {len(train_text)} train / {len(held_text)} held-out chars -> "
          f"{len(train_ids)} / {len(held_ids)} tokens")

    model = build_model(eot_id)
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters")
    start = time.time()
    train(model, train_ids, held_ids)
    minutes = (time.time() - start) / 60
    train_ppl, _ = evaluate(model, train_ids)
    held_ppl, held_acc = evaluate(model, held_ids)
    print(f"trained {STEPS} steps in {minutes:.1f} min: train ppl {train_ppl:.2f}, "
          f"held-out ppl {held_ppl:.2f} (top-1 {held_acc * 100:.1f}%)")

    cut = held_text.rfind("\n", 0, 8000)  # the first ~8000 characters, ending at a line boundary
    eval_text = held_text[:cut + 1]
    eval_ids = torch.tensor(tok.encode(eval_text).ids[:512])
    before, _ = evaluate(model, eval_ids)

    # transformers 5 writes safetensors only (safe_serialization is gone); float16 halves the file.
    model.to(torch.float16).save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    (out_dir / "tiny_lm_eval.txt").write_text(eval_text, encoding="utf-8")
    (out_dir / "tiny_lm_calib.txt").write_text(calibration_text(), encoding="utf-8")

    # Reload what was written and check the float16 save on the eval file's first 512 tokens.
    reloaded = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    eval_ids = torch.tensor(tok.encode((out_dir / "tiny_lm_eval.txt").read_text(encoding="utf-8")).ids[:512])
    ppl, acc = evaluate(reloaded, eval_ids)  # two 256-token windows, as trained
    print(f"tiny_lm: reloaded float16 weights, held-out ppl {ppl:.2f} (float32 before saving {before:.2f}), "
          f"greedy top-1 {acc * 100:.1f}% on the first {len(eval_ids)} tokens of tiny_lm_eval.txt; wrote {folder}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--calib-text"]:
        (HERE / "tiny_lm_calib.txt").write_text(calibration_text(), encoding="utf-8")
    else:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
