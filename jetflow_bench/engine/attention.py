"""Attention backends behind one signature, so the target and the draft heads can switch kernels.

Every backend takes (q, k, v, mask, scale) with a structural `TreeMask` (prefix lengths + an
entry table, see ``jetflow_bench.kernels.mask``) and returns (B, H_q, N, hd):

    sdpa    PyTorch scaled_dot_product_attention with the dense additive mask — the reference
    triton  the Triton tree-attention kernel (bit-packed entry mask; on CPU only in the interpreter)
    flex    torch FlexAttention, its mask function looking up the precomputed entry table

Kernel backends import lazily, so choosing ``sdpa`` never imports Triton.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import load_attr
from jetflow_bench.kernels.mask import TreeMask

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, TreeMask | None, float], torch.Tensor]


def sdpa_attention(
    q: torch.Tensor,  # (B, H_q, N, hd)
    k: torch.Tensor,  # (B, H_kv, T, hd)
    v: torch.Tensor,  # (B, H_kv, T, hd)
    mask: TreeMask | None,  # None: every query sees every key
    scale: float,
) -> torch.Tensor:  # (B, H_q, N, hd)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else mask.additive(), scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )


# name -> the backend itself, or "module:function" imported on first use
ATTENTION_BACKENDS: dict[str, AttentionFn | str] = {
    "sdpa": sdpa_attention,
    "triton": "jetflow_bench.kernels.triton_tree:tree_attention",
    "flex": "jetflow_bench.kernels.flex:flex_tree_attention",
}
DEFAULT_ATTENTION = "sdpa"  # on every device until scripts/gpu_check.sh has passed on a real GPU


def get_attention(name: str, device: torch.device | str = "cpu") -> AttentionFn:
    """The backend ``name`` for tensors on ``device``; a one-line error says what is missing."""
    if name not in ATTENTION_BACKENDS:
        raise JfbenchError(f"unknown attention backend {name!r}: choose one of {', '.join(ATTENTION_BACKENDS)}")
    entry = ATTENTION_BACKENDS[name]
    if not isinstance(entry, str):
        return entry
    from jetflow_bench.kernels import require_backend

    require_backend(name, torch.device(device))
    return load_attr(entry)
