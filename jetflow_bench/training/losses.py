"""Distillation losses against the frozen target's next-token distribution (the paper's loss ablations).

With p = target distribution and q = draft distribution at a predicted position:
    fkl  forward KL  KL(p || q) = sum_y p (log p - log q)   mass-covering: q must cover what p may pick
    rkl  reverse KL  KL(q || p) = sum_y q (log q - log p)   mode-seeking
    sft  cross-entropy on the target's argmax (hard labels), -log q(argmax p)
Each position carries a weight (later draft depths count less); the loss is the weighted mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def distill_loss(
    draft_logits: torch.Tensor,  # (M, V) at the predicted positions
    target_logits: torch.Tensor,  # (M, V) the target's logits for the same positions
    weights: torch.Tensor,  # (M,) >= 0
    kind: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weighted mean loss, top-1 agreement share) over M positions."""
    draft_logp = F.log_softmax(draft_logits.float(), dim=-1)  # (M, V)
    target_logp = F.log_softmax(target_logits.float(), dim=-1)  # (M, V)
    if kind == "fkl":
        per_pos = (target_logp.exp() * (target_logp - draft_logp)).sum(-1)
    elif kind == "rkl":
        per_pos = (draft_logp.exp() * (draft_logp - target_logp)).sum(-1)
    elif kind == "sft":
        per_pos = -draft_logp.gather(-1, target_logp.argmax(-1, keepdim=True)).squeeze(-1)
    else:
        raise ValueError(f"unknown loss {kind!r}")
    loss = (per_pos * weights).sum() / weights.sum().clamp(min=1e-9)
    agree = (draft_logp.argmax(-1) == target_logp.argmax(-1)).float().mean()
    return loss, agree


def depth_weights(depth: torch.Tensor, decay: float) -> torch.Tensor:
    """exp(-(depth - 1) / decay) for drafted depth >= 1 (DFlash's position decay); decay 0 -> all ones."""
    if decay <= 0:
        return torch.ones_like(depth, dtype=torch.float32)
    return torch.exp(-(depth.float() - 1) / decay)
