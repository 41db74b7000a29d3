"""Small randomly initialised Llama / Qwen2 / Qwen3 models, saved like real ones for loading tests."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB = 64
FAMILIES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}


def random_model(family: str = "qwen3", gqa: bool = True, seed: int = 0, layers: int = 2):
    config_cls, model_cls = FAMILIES[family]
    torch.manual_seed(seed)
    config = config_cls(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2 if gqa else 4, head_dim=16,
        max_position_embeddings=1024, eos_token_id=1, bos_token_id=0, pad_token_id=0,
    )
    return model_cls(config).eval()


def word_tokenizer() -> PreTrainedTokenizerFast:
    """Token i is the word "w{i}"; enough to round-trip ids through text."""
    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0", unk_token="w2")


def save_random_model(path: Path, family: str = "qwen3", gqa: bool = True) -> Path:
    random_model(family, gqa).save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    return path


def repetitive_prompts(n: int, seed: int = 0) -> list[list[int]]:
    """Prompts with repeated phrases, so prompt lookup has something to find."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        phrase = [rng.randrange(2, 40) for _ in range(rng.randrange(3, 7))]
        prompts.append([rng.randrange(2, 64) for _ in range(rng.randrange(1, 6))] + phrase * rng.randrange(2, 5))
    return prompts
