"""Training objective of block heads (dflash, jetflow).

Per sequence, ``anchors`` random anchor positions p each open a block [x_p, x_{p+1} .. x_{p+D}] at
positions p .. p+D that sees the fused context features of positions < p (the anchor is the root
at inference: not yet in the target's cache). Entry j of a block predicts its own token x_{p+j}
in place, against the target's distribution at position p+j-1.

* dflash: every drafted position is a MASK, bidirectional in-block attention (DFlash).
* jetflow: a random-length prefix x_{p+1..p+k} stays real and the rest is masked, causal in-block
  attention — with k = 0 the head learns pass 1 (all masks), with k > 0 the first mask learns the
  branch-conditioned child distribution that refinement queries after a real path of depth k.
  Loss positions are the masks; depth weights count from the last real token.

Worked example, D = 4, k = 1, block at p = 10: entries x10 x11 M M M at positions 10..14;
loss at entries 2, 3, 4 (tokens x12, x13, x14) with teacher rows 11, 12, 13, weights depth 1, 2, 3.
"""

from __future__ import annotations

import torch

from drafters.head import DraftHead
from drafters.masks import block_allowed, context_allowed, join
from jetflow_bench.training.config import TrainConfig
from jetflow_bench.training.losses import depth_weights, distill_loss
from jetflow_bench.training.teacher import TeacherBatch


def prefix_lengths(config: TrainConfig, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """Real tokens kept after each anchor: 0 for dflash; for jetflow 0 with prob ``prefix_zero``, else 1..D-1."""
    if config.drafter != "jetflow" or config.block_size <= 2:
        return torch.zeros(shape, dtype=torch.long)
    uniform = torch.randint(1, config.block_size - 1, shape, generator=generator)
    return torch.where(torch.rand(shape, generator=generator) < config.prefix_zero, 0, uniform)


def block_loss(
    head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, top-1 agreement) of one batch; see the module docstring."""
    tokens, lengths = batch.tokens, batch.lengths
    device = tokens.device
    b, t = tokens.shape
    a, n = config.anchors, config.block_size
    anchors = batch.random_positions(a, 1, generator)  # (B, A) in [1, len-2]: a token follows each
    k = prefix_lengths(config, (b, a), generator).to(device)  # (B, A)
    offsets = torch.arange(n, device=device)  # (n,)
    pos = anchors[..., None] + offsets  # (B, A, n) absolute position of each entry
    exists = pos < lengths[:, None, None]
    is_mask = offsets > k[..., None]  # (B, A, n); offset 0 (anchor) is always real
    block_tokens = tokens.gather(1, pos.clamp(max=t - 1).flatten(1))  # (B, A*n)

    _, store = batch.context(head)
    x = head.block_inputs(block_tokens, is_mask.flatten(1))  # (B, A*n, H)
    sees_context = context_allowed(anchors.repeat_interleave(n, dim=1), t)  # (B, A*n, T): positions < anchor
    mask = join(sees_context, block_allowed(head.cfg.mode, a, n, device), x.dtype)
    hidden = head(x, pos.flatten(1), mask, store)  # (B, A*n, H)

    predicted = (is_mask & exists).flatten(1)  # (B, A*n)
    rows, entries = predicted.nonzero(as_tuple=True)  # (M,), (M,)
    teacher = batch.logits[rows, pos.flatten(1)[rows, entries] - 1]  # (M, V)
    depth = (offsets - k[..., None]).flatten(1)[rows, entries]  # (M,) depth below the last real token
    return distill_loss(head.logits(hidden[rows, entries]), teacher, depth_weights(depth, config.decay), config.loss)
