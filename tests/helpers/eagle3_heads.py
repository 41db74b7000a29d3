"""EAGLE-3 heads in SpecForge's layout, written key by key, and drafters fed prompts the way the engine
feeds them; shared by the EAGLE-3 and export tests and results/baselines/vllm-heads."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.target import TargetRunner
from tests.helpers.heads import PROMPTS
from tests.helpers.random_models import VOCAB

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INNER = 64, 4, 2, 16, 96
SHAPE = {"vocab": VOCAB, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "inner": INNER}


def write_specforge_head(
    folder: Path, *, draft_vocab: int = VOCAB, aux=(0, 1, 2), seed: int = 0, embed: torch.Tensor | None = None,
    shape: dict[str, int] | None = None, **config_overrides,
) -> Path:
    """An EAGLE-3 head as SpecForge's LlamaForCausalLMEagle3 saves it: every key and shape its
    ``__init__`` creates, the vocabulary maps as its buffers, the config keys its loaders read.
    Random weights, sizes from ``shape`` (keys of `SHAPE`); also used by
    results/baselines/vllm-heads to hand vLLM a head of this layout."""
    size = {**SHAPE, **(shape or {})}
    VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INNER = (size[k] for k in SHAPE)  # noqa: N806
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.2

    tensors = {
        "fc.weight": rand(HIDDEN, 3 * HIDDEN),
        "midlayer.input_layernorm.weight": 1 + rand(HIDDEN),
        "midlayer.hidden_norm.weight": 1 + rand(HIDDEN),
        "midlayer.self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": rand(KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": rand(KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
        "midlayer.post_attention_layernorm.weight": 1 + rand(HIDDEN),
        "midlayer.mlp.gate_proj.weight": rand(INNER, HIDDEN),
        "midlayer.mlp.up_proj.weight": rand(INNER, HIDDEN),
        "midlayer.mlp.down_proj.weight": rand(HIDDEN, INNER),
        "norm.weight": 1 + rand(HIDDEN),
        "lm_head.weight": rand(draft_vocab, HIDDEN),
    }
    kept = torch.randperm(VOCAB, generator=gen)[:draft_vocab].sort().values  # the draft vocabulary, ascending
    tensors["d2t"] = kept - torch.arange(draft_vocab)  # draft id d -> target id d + d2t[d]
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[kept] = True
    tensors["t2d"] = t2d
    if embed is not None:
        tensors["embed_tokens.weight"] = embed
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": HIDDEN, "intermediate_size": INNER, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM, "num_hidden_layers": 1, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False, "pad_token_id": 0,
        "vocab_size": VOCAB, "draft_vocab_size": draft_vocab, "target_hidden_size": HIDDEN,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux), "use_aux_hidden_state": True},
        **config_overrides,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def observe_prompts(drafter, target: TargetRunner, prompts=PROMPTS, root: int = 1) -> list[SequenceView]:
    seqs = [SequenceView(i, [*p, root], len(p)) for i, p in enumerate(prompts)]
    out = target.score(prompts, taps=drafter.taps)
    drafter.reset(seqs)
    drafter.observe(seqs, [out.hidden[i, : len(p)] for i, p in enumerate(prompts)])
    return seqs
