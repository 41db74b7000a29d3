"""`NextTokenDrafter`, a one-step head (Medusa-1 style), and its training objective.

From the context the head guesses the token after the root, and the drafter proposes the root with
its top ``guesses`` guesses as children. The objective lays out blocks ``[x_p, MASK]`` that predict
x_{p+1}, with a one-layer head. Its export format copies the head folder as it is.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import torch

from drafters.learned import LearnedDrafter
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.heads.masks import block_allowed, context_allowed, join
from jetflow_bench.training.objective import TrainingObjective
from tests.drafters.next_token import NAME


def one_step_blocks(head, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks [x_p, MASK] laid end to end: tokens (B, 2A) -> entry inputs (B, 2A, H), is-MASK (B, 2A)."""
    b, e = tokens.shape
    is_mask = torch.tensor([False, True], device=tokens.device).repeat(e // 2).expand(b, -1)
    return head.block_inputs(tokens, is_mask), is_mask


class NextTokenTraining(TrainingObjective):
    """At ``anchors`` random positions p per sequence, the block [x_p, MASK] sees the context < p;
    the MASK predicts x_{p+1} against the target's distribution at p (every position weighs the same)."""

    def head_layers(self, target_layers: int) -> int:
        return 1

    def loss(self, head, batch, config, generator):
        b, t = batch.tokens.shape
        anchors = batch.random_positions(config.anchors, 1, generator)  # (B, A)
        pos = (anchors[..., None] + torch.arange(2, device=anchors.device)).flatten(1)  # (B, 2A)
        x, is_mask = one_step_blocks(head, batch.tokens.gather(1, pos.clamp(max=t - 1)))
        inner = block_allowed(head.cfg.mode, anchors.shape[1], 2, anchors.device)  # (2A, 2A)
        mask = join(context_allowed(anchors.repeat_interleave(2, dim=1), t), inner, x.dtype)
        _, store = batch.context(head)
        hidden = head(x, pos, mask, store)  # (B, 2A, H)
        rows, entries = (is_mask & (pos < batch.lengths[:, None])).nonzero(as_tuple=True)
        return batch.distill(head, hidden[rows, entries], rows, pos[rows, entries] - 1, torch.ones(len(rows)), config.loss)


NEXT_TOKEN_TRAINING = NextTokenTraining()


class NextTokenDrafter(LearnedDrafter):
    """Proposes root -> the head's top ``guesses`` guesses of the next token (one head forward per step)."""

    name = NAME

    def __init__(self, head, info, tree, guesses: int = 1) -> None:
        super().__init__(head, info, tree)
        self.guesses = guesses

    @torch.inference_mode()
    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        cache = self.require_cache(seqs)
        device = cache.last_feature.device
        roots = torch.tensor([[s.tokens[-1], 0] for s in seqs], device=device)  # (B, 2); the MASK's token is unused
        x, _ = one_step_blocks(self.head, roots)
        positions = cache.anchor_positions()[:, None] + torch.arange(2, device=device)  # (B, 2)
        mask = cache.mask(block_allowed(self.head.cfg.mode, 1, 2, device), x.dtype)
        hidden = self.head(x, positions, mask, cache.scratch(0, 2))  # (B, 2, H)
        n = min(self.guesses, budget - 1)
        guesses = self.head.logits(hidden[:, 1]).topk(n, dim=-1).indices.tolist()  # (B, n)
        return [DraftTree([s.tokens[-1], *g], [-1] + [0] * n) for s, g in zip(seqs, guesses, strict=True)]


def export_copy(source: Path, out: Path) -> Path:
    """The family's one export format: the head folder, copied as it is."""
    shutil.copytree(source, out)
    return out
