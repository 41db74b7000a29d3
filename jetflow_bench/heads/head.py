"""The draft head shared by every learned drafter.

Feature fusion: the target's hidden states tapped at K layers are concatenated, projected by one
bias-free Linear to the hidden size and RMS-normalised (``fc`` + ``hidden_norm``). The fused context
features enter every draft layer as keys/values only — k/v projections are applied to them and to
the drafted entries alike, queries come from the drafted entries — so the head never re-runs the
context, and a context KV cache of one (k, v) per layer and position suffices.

Draft layers are Qwen3-style decoder layers (RMSNorm, GQA attention with q/k norm and RoPE at
absolute positions, SwiGLU MLP); the token embedding and LM head are the target's own modules,
shared and frozen (held outside ``state_dict``). Module names follow the DFlash / JetSpec weight
layout (``fc``, ``hidden_norm``, ``layers.*``, ``norm``) so released heads load without renaming.

Keys and values are always laid out as [context ; entries]; a ``KVStore`` decides where they live
(concatenated tensors in training, the in-place context cache at inference).

Reduced draft vocabulary (EAGLE-3's d2t): a head with ``draft_vocab = N`` scores only N target
tokens — the rows ``d2t`` (a saved buffer of target ids, the most frequent tokens of its training
data) of the target's LM head — so its LM-head cost falls from V x H to N x H per row. Its logits
are over those N slots; `to_target` maps a slot back to the target's id. Verification is the
target's, so output stays lossless; the head just never proposes a token outside ``d2t``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from jetflow_bench.core.flops import TransformerShape, matrix_params
from jetflow_bench.engine.attention import DEFAULT_ATTENTION, AttentionFn, get_attention
from jetflow_bench.engine.drafter import DraftCost
from jetflow_bench.engine.rope import Rotary, rotate
from jetflow_bench.kernels.mask import TreeMask


@dataclass(frozen=True)
class HeadConfig:
    """Shape and wiring of a draft head; stored in every checkpoint's config.json."""

    hidden_size: int  # = the target's (embedding and LM head are shared)
    intermediate_size: int  # SwiGLU width
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    taps: tuple[int, ...]  # target layers whose outputs are fused, in fc's concatenation order
    block_size: int = 16  # anchor + D drafted positions for block heads
    mode: str = "causal"  # attention inside a block: "causal" | "bidirectional"
    mask_token_id: int | None = None  # target token whose embedding initialises (or is) the MASK input
    eagle_input: bool = False  # EAGLE: entry input = Linear([token embedding ; parent feature])
    draft_vocab: int | None = None  # N target tokens the head scores (buffer ``d2t``); None = the whole vocabulary
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    attention_bias: bool = False

    def to_dict(self) -> dict:
        return {**asdict(self), "taps": list(self.taps)}

    @classmethod
    def from_dict(cls, data: dict) -> HeadConfig:
        return cls(**{**data, "taps": tuple(data["taps"])})


class KVStore(Protocol):
    """Where one forward's keys/values live: returns [context ; entries] for a layer."""

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: (B, H_kv, N, hd) of this forward's entries -> keys, values (B, H_kv, T + N, hd)."""
        ...


class ConcatKV:
    """Training store: context k/v computed for the batch, entries concatenated after them."""

    def __init__(self, context: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.context = context  # per layer (k, v), each (B, H_kv, T, hd)
        self.latest: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer, the last forward's entries

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx_k, ctx_v = self.context[layer]
        if layer == 0:
            self.latest = []
        self.latest.append((k, v))
        return torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)

    def absorb(self) -> None:
        """Keep the last forward's entries as keys for the next one (EAGLE's training-time test)."""
        self.context = [(torch.cat([ck, k], 2), torch.cat([cv, v], 2)) for (ck, cv), (k, v) in zip(self.context, self.latest, strict=True)]


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftAttention(nn.Module):
    """GQA with q/k RMSNorm; entries query [context ; entries]."""

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        h, hd = cfg.hidden_size, cfg.head_dim
        self.q_heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, hd
        self.q_proj = nn.Linear(h, cfg.num_heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * hd, h, bias=cfg.attention_bias)
        self.q_norm = nn.RMSNorm(hd, eps=cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(hd, eps=cfg.rms_norm_eps)

    def key_value(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, N, H) -> rotated keys and values (B, H_kv, N, hd)."""
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return rotate(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,  # (B, N, H) normalised entry states
        cos: torch.Tensor,  # (B, 1, N, hd)
        sin: torch.Tensor,  # (B, 1, N, hd)
        mask: TreeMask | None,  # over [context ; entries]
        store: KVStore,
        layer: int,
        attend: AttentionFn,
    ) -> torch.Tensor:  # (B, N, H)
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, n, self.q_heads, self.head_dim)).transpose(1, 2)  # (B, Hq, N, hd)
        keys, values = store.extend(layer, *self.key_value(x, cos, sin))  # (B, H_kv, T + N, hd)
        o = attend(rotate(q, cos, sin), keys, values, mask, self.head_dim**-0.5)  # (B, Hq, N, hd)
        return self.o_proj(o.transpose(1, 2).reshape(b, n, -1))


class DraftLayer(nn.Module):
    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(
        self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: TreeMask | None, store: KVStore,
        layer: int, attend: AttentionFn,
    ) -> torch.Tensor:  # (B, N, H), pre-norm residual block
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, mask, store, layer, attend)
        return h + self.mlp(self.post_attention_layernorm(h))


class HeadMeter:
    """Counts an inference head's forwards and their FLOPs until `take` hands them over.

    The head calls it from ``forward`` (one pass over (B, N) entries attending to T + N keys),
    ``logits`` (LM-head rows), ``fuse`` (committed context tokens: fusion + context k/v) and
    ``eagle_inputs`` (EAGLE's input projection); formulas in `jetflow_bench.core.flops`.
    """

    def __init__(self, head: DraftHead) -> None:
        cfg = head.cfg
        shape = TransformerShape.of(list(head.layers), head._shared[1], cfg.num_heads, cfg.head_dim)
        if cfg.draft_vocab is not None:  # the LM head is cut to the draft vocabulary's rows
            shape = dataclasses.replace(shape, lm_head_params=cfg.draft_vocab * cfg.hidden_size)
        self.shape = shape
        self.context_params = matrix_params([head.fc]) + sum(
            matrix_params([layer.self_attn.k_proj, layer.self_attn.v_proj]) for layer in head.layers
        )  # per committed token: fusion Linear + every layer's context k/v projections
        self.input_params = matrix_params([head.input_proj]) if cfg.eagle_input else 0
        self.passes, self.entries, self.flops = 0, 0, 0.0

    def forward(self, rows: int, entries: int, keys: int) -> None:
        self.passes += 1
        self.entries += entries
        self.flops += rows * self.shape.layer_flops(entries, keys)

    def add(self, flops: float) -> None:
        self.flops += flops

    def take(self, rows: int) -> DraftCost:
        share = self.flops / rows if rows else 0.0
        cost = DraftCost(self.passes, [self.entries] * rows, [share] * rows)
        self.passes, self.entries, self.flops = 0, 0, 0.0
        return cost


class DraftHead(nn.Module):
    """Fusion + draft layers + final norm; the target's embedding and LM head are borrowed."""

    def __init__(
        self, cfg: HeadConfig, embed: nn.Embedding, lm_head: nn.Module, attention: str = DEFAULT_ATTENTION
    ) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.taps) * h, h, bias=False)
        self.hidden_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.mask_embedding = nn.Parameter(torch.zeros(h))
        if cfg.eagle_input:
            self.input_proj = nn.Linear(2 * h, h, bias=False)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)
        if cfg.draft_vocab is not None:  # (N,) target id of each draft slot, saved with the weights
            self.register_buffer("d2t", torch.arange(cfg.draft_vocab, dtype=torch.long))  # set by training or loading
        else:
            self.d2t = None
        self._draft_rows: tuple[torch.Tensor, torch.Tensor | None] | None = None  # LM-head rows of d2t, built once
        self._shared = (embed, lm_head)  # a tuple, so nn.Module registers neither (not saved, not trained)
        self.attend = get_attention(attention, embed.weight.device)  # inference only: kernels have no backward
        self.meter: HeadMeter | None = None  # set by an inference drafter (`count_cost`); None in training

    def count_cost(self) -> HeadMeter:
        """Start counting this head's forwards and FLOPs (inference)."""
        self.meter = HeadMeter(self)
        return self.meter

    def init_weights(self, seed: int) -> None:
        """Fresh head: small normal weights, unit norms, MASK = the mask token's embedding."""
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif p.dim() == 2:
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        with torch.no_grad():
            mask_id = self.cfg.mask_token_id or 0
            self.mask_embedding.copy_(self._shared[0].weight[mask_id])

    # ------------------------------------------------------------------ inputs and outputs
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._shared[0](tokens)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., H) -> draft logits (..., V) through the target's LM head; (..., N) over the
        draft vocabulary's slots when the head has one (`to_target` maps slots to token ids)."""
        if self.meter is not None:
            self.meter.add(self.meter.shape.lm_head_flops(hidden.shape[:-1].numel()))
        return F.linear(hidden, *self.lm_rows())

    def lm_rows(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weight (V or N, H) and bias of the target's LM head over the tokens this head scores:
        the draft vocabulary's rows (gathered once: the target is frozen; again only when the head
        moves to another device or dtype), else the whole head."""
        lm_head = self._shared[1]
        weight = lm_head.weight
        if self.d2t is None:
            return weight, getattr(lm_head, "bias", None)
        if self._draft_rows is None or self._draft_rows[0].device != weight.device or self._draft_rows[0].dtype != weight.dtype:
            bias = getattr(lm_head, "bias", None)
            d2t = self.d2t.to(weight.device)
            self._draft_rows = (weight.detach()[d2t], None if bias is None else bias.detach()[d2t])
        return self._draft_rows

    def to_target(self, slots: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary slots -> target token ids (identity without a draft vocabulary)."""
        return slots if self.d2t is None else self.d2t[slots]

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """Tapped target states (..., K, H) in ``cfg.taps`` order -> fused features (..., H)."""
        if self.meter is not None:  # each fused token also gets its context k/v in every layer
            self.meter.add(2 * self.meter.context_params * taps.shape[:-2].numel())
        return self.hidden_norm(self.fc(taps.flatten(-2)))

    def block_inputs(self, tokens: torch.Tensor, is_mask: torch.Tensor) -> torch.Tensor:
        """tokens, is_mask (B, N) -> inputs (B, N, H): real tokens embedded, masks = MASK vector."""
        return torch.where(is_mask[..., None], self.mask_embedding.to(self.fc.weight.dtype), self.embed(tokens))

    def eagle_inputs(self, tokens: torch.Tensor, parent_features: torch.Tensor) -> torch.Tensor:
        """EAGLE entry: token embedding fused with the feature of the position before it. (B, N, H)."""
        if self.meter is not None:
            self.meter.add(2 * self.meter.input_params * tokens.numel())
        return self.input_proj(torch.cat([self.embed(tokens), parent_features], dim=-1))

    # ------------------------------------------------------------------ attention
    def context_kv(self, fused: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Fused features (B, T, H) at positions (B, T) -> per layer (k, v), each (B, H_kv, T, hd)."""
        cos, sin = self.rotary(positions, fused.dtype)
        return [layer.self_attn.key_value(fused, cos, sin) for layer in self.layers]

    def forward(
        self,
        x: torch.Tensor,  # (B, N, H) entry inputs
        positions: torch.Tensor,  # (B, N) absolute positions
        mask: TreeMask,  # over [context ; entries]
        store: KVStore,
    ) -> torch.Tensor:  # (B, N, H) normalised output features (LM-head input; EAGLE feeds them back)
        if self.meter is not None:
            self.meter.forward(x.shape[0], x.shape[1], mask.kv_len)
        return self.run(x, positions, mask, store, self.attend)

    @property
    def input_size(self) -> int:
        """Width of an entry input (``forward``'s x)."""
        return self.cfg.hidden_size

    def run(
        self, x: torch.Tensor, positions: torch.Tensor, mask: TreeMask | None, store: KVStore, attend: AttentionFn
    ) -> torch.Tensor:
        """``forward`` without the cost meter, through ``attend``: the part `--compile` traces
        (`drafters.head_cache.StaticHead`, whose attention holds its own mask)."""
        cos, sin = self.rotary(positions, x.dtype)
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, mask, store, i, attend)
        return self.norm(h)
