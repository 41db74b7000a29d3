"""Toy-target presets: every size, corpus-mix and optimiser choice in one frozen record.

The record is hashed into the cache path (`config_hash`), so changing any default here trains a new
target instead of silently reusing an old one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import did_you_mean

# Bump when the corpus formatting, tokenizer or training loop changes in a way that alters the weights.
FORMAT_VERSION = 1
MARKER = "jfbench_toy.json"  # written last into a target folder: its presence means training finished


@dataclass(frozen=True)
class ToyPreset:
    """A toy Qwen3 target: tokenizer, model shape, data mix and training schedule."""

    name: str
    # Tokenizer: byte-level BPE vocabulary size, special tokens included (the corpus may yield fewer).
    vocab_size: int
    # Model (Qwen3 decoder): residual width, SwiGLU width, depth, GQA heads and per-head width.
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    # RoPE positions the config advertises; quality beyond `seq_len` (the trained window) is untested.
    max_position_embeddings: int = 2048
    rope_theta: float = 10_000.0
    # Training: optimiser steps of `batch_size` windows of `seq_len` tokens each.
    steps: int = 400
    batch_size: int = 16
    seq_len: int = 256
    lr: float = (
        3e-3  # peak AdamW learning rate, reached after `warmup_steps`, cosine-decayed to lr * min_lr_ratio
    )
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1  # on matrices only; norms and embeddings are not decayed
    grad_clip: float = 1.0
    # bf16 matmuls on CPU: ~1.7x faster from ~5M parameters up, slower below; used only where the
    # CPU runs bf16 natively (`runtime.native_bf16`: emulated, a step is ~13x slower), recorded per target
    bf16_autocast: bool = False
    # Data: sampling probability of each source (renormalised over the sources present) ...
    mixture: tuple[tuple[str, float], ...] = (
        ("gsm8k", 0.55),
        ("mbpp", 0.15),
        ("sharegpt", 0.3),
        ("humaneval", 1.0),
    )
    # ... at most this many characters read per source (None: all), to bound tokenizer and encoding time ...
    max_chars_per_source: int | None = None
    # ... and this share of each source's documents held out for the perplexity check (at least one).
    heldout_fraction: float = 0.02
    eval_windows: int = 64  # held-out windows of `seq_len` scored at the end (fewer if the split is smaller)
    tokenizer_max_chars: int = 6_000_000  # characters of training text the BPE trainer sees

    def with_steps(self, steps: int | None) -> ToyPreset:
        """This preset with `--steps` applied (warm-up shrunk so that short runs still decay)."""
        if steps is None:
            return self
        if steps < 1:
            raise JfbenchError(f"--steps {steps} must be at least 1")
        return dataclasses.replace(
            self, steps=steps, warmup_steps=min(self.warmup_steps, max(steps // 10, 1))
        )

    def config_hash(self, seed: int, corpus_key: str) -> str:
        """Short hash of everything that determines the weights (not threads: same seed, same recipe)."""
        blob = json.dumps(
            {
                "preset": dataclasses.asdict(self),
                "seed": seed,
                "corpus": corpus_key,
                "format": FORMAT_VERSION,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


PRESETS: dict[str, ToyPreset] = {
    # ~0.2M parameters, well under a minute on 2 cores from a cold cache: the quick `jfbench demo`,
    # which must fit in a few minutes with its heads. Too small to say anything a bigger model would.
    "nano": ToyPreset(
        name="nano",
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=192,
        num_layers=3,
        num_heads=2,
        num_kv_heads=1,
        head_dim=32,
        steps=200,
        batch_size=8,
        seq_len=192,
        lr=5e-3,
        max_chars_per_source=600_000,
        tokenizer_max_chars=600_000,
        eval_windows=16,
    ),
    # ~0.85M parameters, ~1 min of training on 2 cores: for tests and CI. Small models run faster in fp32.
    "micro": ToyPreset(
        name="micro",
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=384,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        steps=400,
        batch_size=8,
        seq_len=256,  # a GSM8K question + answer fits, so demos decode within trained positions
        lr=3e-3,
        max_chars_per_source=2_500_000,
        tokenizer_max_chars=3_000_000,
    ),
    # ~5.8M parameters, ~18 min on 2 idle cores at ~4.6k tok/s (bf16 autocast), leaving room for a
    # busy machine within 30 min; GSM8K-heavy so that it writes GSM8K-style solutions.
    "tiny": ToyPreset(
        name="tiny",
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=768,
        num_layers=6,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        steps=1200,
        batch_size=8,
        seq_len=512,
        lr=2e-3,
        warmup_steps=50,
        bf16_autocast=True,
        mixture=(("gsm8k", 0.6), ("mbpp", 0.15), ("sharegpt", 0.25), ("humaneval", 1.0)),
        max_chars_per_source=8_000_000,
    ),
    # The paper's proportions: a 2-layer block head is 1/7 of its 14 layers and the taps (1, 6, 11)
    # skip the last three, as for a 36-layer target with a 5-layer head. Narrow (192 wide, 7.0M
    # parameters, 6.2M of them in the layers) so that depth, not width, sets the cost, with the
    # same data and schedule as tiny so the two compare. 40.4 min on 2 idle cores (~2.0k tok/s, bf16
    # autocast), held-out perplexity 38.4 (tiny: 38.6).
    "deep": ToyPreset(
        name="deep",
        vocab_size=4096,
        hidden_size=192,
        intermediate_size=576,
        num_layers=14,
        num_heads=4,
        num_kv_heads=2,
        head_dim=48,
        steps=1200,
        batch_size=8,
        seq_len=512,
        lr=2e-3,
        warmup_steps=50,
        bf16_autocast=True,
        mixture=(("gsm8k", 0.6), ("mbpp", 0.15), ("sharegpt", 0.25), ("humaneval", 1.0)),
        max_chars_per_source=8_000_000,
    ),
}


def get_preset(name: str) -> ToyPreset:
    """The preset called exactly `name`; an unknown name is a user error with a suggestion."""
    if name in PRESETS:
        return PRESETS[name]
    hint = did_you_mean(name, PRESETS)
    raise JfbenchError(f"--preset {name!r} is unknown: {hint}choose one of {', '.join(PRESETS)}")
