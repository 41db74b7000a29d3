"""The toy model, its training loop and the held-out perplexity check."""

from __future__ import annotations

import contextlib
import math

import torch
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from jetflow_bench.core.progress import TrainProgress
from jetflow_bench.core.runtime import native_bf16
from jetflow_bench.toy.data import WindowSampler
from jetflow_bench.toy.presets import ToyPreset


def build_model(preset: ToyPreset, tokenizer: PreTrainedTokenizerFast) -> Qwen3ForCausalLM:
    """A freshly initialised Qwen3 sized by the preset (vocabulary = the trained tokenizer's)."""
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_layers,
        num_attention_heads=preset.num_heads,
        num_key_value_heads=preset.num_kv_heads,
        head_dim=preset.head_dim,
        max_position_embeddings=preset.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": preset.rope_theta},
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    config._attn_implementation = "sdpa"  # a boolean mask is added to the scores under eager, silently wrong
    return Qwen3ForCausalLM(config)


def lr_at(step: int, preset: ToyPreset) -> float:
    """Linear warm-up to `preset.lr`, then cosine decay to `lr * min_lr_ratio` at the last step (0-based)."""
    if step < preset.warmup_steps:
        return preset.lr * (step + 1) / preset.warmup_steps
    progress = (step - preset.warmup_steps) / max(1, preset.steps - preset.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return preset.lr * (preset.min_lr_ratio + (1.0 - preset.min_lr_ratio) * cosine)


def _optimizer(model: torch.nn.Module, preset: ToyPreset) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D matrices only (the tied embedding included, as in GPT-2/nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": preset.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=preset.lr, betas=(0.9, 0.95))


def uses_bf16_autocast(preset: ToyPreset) -> bool:
    """The preset asks for bf16 autocast and this CPU runs bf16 natively (`runtime.native_bf16`)."""
    return preset.bf16_autocast and native_bf16()


def _autocast(enabled: bool) -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def train_steps(
    model: Qwen3ForCausalLM,
    sampler: WindowSampler,
    preset: ToyPreset,
    seed: int,
    progress: TrainProgress,
) -> list[float]:
    """Run `preset.steps` AdamW steps on sampled windows; returns the loss of every step."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = _optimizer(model, preset)
    autocast = uses_bf16_autocast(preset)
    model.train()
    losses = []
    with progress:
        for step in range(preset.steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, preset)
            batch = sampler.sample(preset.batch_size, preset.seq_len, generator)  # (B, T)
            with _autocast(autocast):
                loss = model(input_ids=batch, labels=batch).loss  # mean next-token NLL over B*(T-1)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), preset.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            progress.update(step + 1, losses[-1])
    model.eval()
    return losses


@torch.no_grad()
def heldout_nll(model: Qwen3ForCausalLM, windows: torch.Tensor, batch_size: int) -> tuple[float, int]:
    """(summed next-token NLL in nats, number of predicted tokens) over (W, T) windows, in fp32."""
    model.eval()
    total, count = 0.0, 0
    for chunk in windows.split(batch_size):  # (b, T)
        logits = model(input_ids=chunk).logits[:, :-1].float()  # (b, T-1, V)
        targets = chunk[:, 1:]  # (b, T-1)
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum"
        )
        total += nll.item()
        count += targets.numel()
    return total, count
