"""Attention backends behind one signature, so the target and the draft heads can switch kernels.

``sdpa`` (PyTorch scaled_dot_product_attention with an explicit additive mask) is the reference;
kernel backends (e.g. a Triton tree-attention kernel) register here under their own names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from jetflow_bench.errors import JfbenchError

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, float], torch.Tensor]


def sdpa_attention(
    q: torch.Tensor,  # (B, H_q, N, hd)
    k: torch.Tensor,  # (B, H_kv, T, hd)
    v: torch.Tensor,  # (B, H_kv, T, hd)
    mask: torch.Tensor | None,  # (B, 1, N, T) additive: 0 = attend, dtype-min = blocked
    scale: float,
) -> torch.Tensor:  # (B, H_q, N, hd)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )


ATTENTION_BACKENDS: dict[str, AttentionFn] = {"sdpa": sdpa_attention}


def get_attention(name: str) -> AttentionFn:
    if name not in ATTENTION_BACKENDS:
        raise JfbenchError(f"unknown attention backend {name!r}: choose one of {', '.join(ATTENTION_BACKENDS)}")
    return ATTENTION_BACKENDS[name]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool (B, N, T) -> additive float mask (B, 1, N, T).

    Boolean masks are silently wrong with some attention implementations (they get added to the
    scores), so every backend receives the additive form.
    """
    blocked = torch.finfo(dtype).min
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, blocked)[:, None]
