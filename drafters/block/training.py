"""Training objective of block heads (dflash, jetflow): `BlockTraining`.

Per sequence, ``anchors`` random anchor positions p (drawn where x_{p+1} is continuation, so no
prompt token is ever a loss target) each open a block of entries at positions
p + offset that sees the fused context features of positions < p (the anchor is the root at
inference: not yet in the target's cache). A MASK entry at offset o predicts its own token
x_{p+o} in place, against the target's distribution at position p+o-1. Block layouts:

* all-mask ``[x_p, M x D]`` (offsets 0..D, ``--layout mask``): pass 1. dflash trains only these
  (bidirectional head), and so does jetflow by default (causal head): the two default recipes
  differ in the in-block mask alone, as the public reimplementations of JetFlow's recipe train it.
* prefix (``--layout prefix``, jetflow): a random-length prefix x_{p+1..p+k} stays real and the
  rest is masked, causal in-block attention; k = 0 is the all-mask block, and for k > 0 the first
  mask learns the branch-conditioned child distribution that refinement queries after a real path.
* packed (``--layout packed``, causal jetflow heads; jetflow-refine's default): the real chain x_p..x_{p+D-1} plus one
  MASK query per chain node, attending tree-causally (the query sees its node's ancestors and
  itself) — exactly the entries a refinement pass builds over a tree, laid on the true path.
  Every prefix length is trained at once, so each block gives D branch-conditioned targets
  instead of one. A ``prefix_zero`` share of anchors stays all-mask for pass 1. Most of its loss
  weight falls on depth-1 queries, so pass 1's deeper marginals get a fraction of the gradient the
  mask layout gives them: it serves what refinement queries, not pass 1.
A jetflow recipe that leaves the layout unset is the old default (before issue 52): packed for a
causal head, prefix for a bidirectional one; heads recorded so keep their cache keys.
Loss positions are the masks; depth weights count from the nearest real ancestor.

``match_depth1`` (prefix layout only) adds blocks [x_p, MASK] until a sequence gives as many
depth-1 queries as the packed layout would (A/2 + A/2 x D instead of A): the packed layout's
extra depth-1 supervision is then no longer a difference between the two (issue: depth-1 confound).

Worked example, prefix, D = 4, k = 1, block at p = 10: entries x10 x11 M M M at positions
10..14; loss at entries 2, 3, 4 (tokens x12, x13, x14), teacher rows 11, 12, 13, depths 1, 2, 3.
Packed, D = 3, p = 10: entries x10 x11 x12 M M M at positions 10 11 12 11 12 13 with parents
-1 0 1 0 1 2; the masks predict x11, x12, x13 (teacher rows 10, 11, 12), each at depth 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from drafters.block import BLOCK_RECORDED, OLD_JETFLOW_LAYOUTS
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.heads.head import DraftHead
from jetflow_bench.heads.masks import block_allowed, context_allowed, join, tree_allowed
from jetflow_bench.training.losses import depth_weights
from jetflow_bench.training.objective import TrainingObjective

if TYPE_CHECKING:
    from jetflow_bench.training.config import TrainConfig
    from jetflow_bench.training.teacher import TeacherBatch



@dataclass
class BlockGroup:
    """``count`` blocks per sequence sharing one entry layout."""

    count: int
    offsets: torch.Tensor  # (E,) position of each entry after its anchor
    allowed: torch.Tensor  # (E, E) bool in-block attention of one block
    is_mask: torch.Tensor  # (B, count, E) bool; offset-0 anchors are always real
    depth: torch.Tensor  # (B, count, E) offset below the nearest real ancestor (masks)


def prefix_group(mode: str, k: torch.Tensor, n: int, device: torch.device) -> BlockGroup:
    """Blocks [x_p, x_{p+1..p+k}, M ...] of n entries, one prefix length k per block (B, A)."""
    offsets = torch.arange(n, device=device)
    k = k.to(device)[..., None]  # (B, A, 1)
    return BlockGroup(k.shape[1], offsets, block_allowed(mode, 1, n, device), offsets > k, offsets - k)


def packed_group(count: int, batch: int, n: int, device: torch.device) -> BlockGroup:
    """Blocks of the real chain x_p..x_{p+D-1} plus a MASK query below each chain node (D = n - 1)."""
    d = n - 1
    chain = torch.arange(d, device=device)
    parents = torch.cat([chain - 1, chain])[None]  # (1, 2D): chain, then one query per chain node
    depths = torch.cat([chain, chain + 1])[None]
    is_mask = torch.arange(2 * d, device=device) >= d
    return BlockGroup(count, depths[0], tree_allowed(parents, depths)[0], is_mask.expand(batch, count, -1),
                      torch.ones(batch, count, 2 * d, dtype=torch.long, device=device))


class BlockTraining(TrainingObjective):
    """A block head's objective; ``real_prefix`` families (jetflow) may also train branch-conditioned
    children: blocks keep a real prefix (layout prefix) or lay out the true path (layout packed)."""

    recorded = BLOCK_RECORDED

    def __init__(self, default_head: str, real_prefix: bool) -> None:
        self.default_head = default_head  # in-block attention of its heads unless the recipe names one
        self.real_prefix = real_prefix  # blocks may keep real tokens after the anchor (prefix / packed layouts)

    def validate(self, config: TrainConfig) -> None:
        if self.settings(config)["layout"] == "packed" and (not self.real_prefix or config.mode != "causal"):
            raise JfbenchError("--layout packed needs a causal jetflow head (a bidirectional block would let each "
                               "query see the token it predicts): add --layout mask or --layout prefix, or drop --head")
        if config.option_values["match_depth1"] and self.settings(config)["layout"] == "packed":
            raise JfbenchError("--match-depth1 gives prefix-layout heads the packed layout's depth-1 queries: "
                               "this head already trains packed (add --layout prefix or drop --match-depth1)")

    def extra_depth1_blocks(self, config: TrainConfig) -> int:
        """Blocks [x_p, MASK] per sequence that ``match_depth1`` adds: the packed layout's depth-1
        queries (one per all-mask block, D per packed block) minus the prefix layout's (one per block)."""
        if not config.option_values["match_depth1"]:
            return 0
        a, d = config.anchors, config.block_size - 1
        all_mask = round(a * config.option_values["prefix_zero"])
        return all_mask + (a - all_mask) * d - a

    def settings(self, config: TrainConfig) -> dict[str, Any]:
        """The training-block layout: the recipe's; unset, all-mask (dflash) or the old jetflow default
        (packed for a causal head, prefix for a bidirectional one: heads recorded before issue 52)."""
        if config.option_values["layout"]:
            return {"layout": config.option_values["layout"]}
        return {"layout": OLD_JETFLOW_LAYOUTS[config.mode] if self.real_prefix else "mask"}

    def prefix_lengths(self, config: TrainConfig, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        """Real tokens kept after each anchor: 0 in all-mask blocks; else 0 with prob ``prefix_zero``, else 1..D-1."""
        if not self.real_prefix or self.settings(config)["layout"] == "mask" or config.block_size <= 2:
            return torch.zeros(shape, dtype=torch.long)
        uniform = torch.randint(1, config.block_size - 1, shape, generator=generator)
        return torch.where(torch.rand(shape, generator=generator) < config.option_values["prefix_zero"], 0, uniform)

    def block_groups(
        self, config: TrainConfig, mode: str, batch: int, generator: torch.Generator, device
    ) -> list[BlockGroup]:
        """The step's block layouts (see the module docstring)."""
        a, n = config.anchors, config.block_size
        if self.settings(config)["layout"] == "packed":
            all_mask = round(a * config.option_values["prefix_zero"])
            groups = [prefix_group(mode, torch.zeros(batch, all_mask, dtype=torch.long), n, device)] if all_mask else []
            return [*groups, packed_group(a - all_mask, batch, n, device)] if a > all_mask else groups
        return [prefix_group(mode, self.prefix_lengths(config, (batch, a), generator), n, device)]

    def run_blocks(
        self, head: DraftHead, batch: TeacherBatch, anchors: torch.Tensor, groups: list[BlockGroup]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One head forward over the blocks of ``groups`` opened at ``anchors`` (B, A) -> hidden
        (B, E, H), and per entry its position, is-MASK and depth (B, E) each."""
        tokens = batch.tokens
        t = tokens.shape[1]
        per_group = anchors.split([g.count for g in groups], dim=1)
        pos = torch.cat([(a[..., None] + g.offsets).flatten(1) for a, g in zip(per_group, groups, strict=True)], 1)
        starts = torch.cat([a.repeat_interleave(len(g.offsets), dim=1) for a, g in zip(per_group, groups, strict=True)], 1)
        is_mask = torch.cat([g.is_mask.flatten(1) for g in groups], 1)  # (B, E)
        depth = torch.cat([g.depth.flatten(1) for g in groups], 1)  # (B, E)
        inner = torch.block_diag(*[g.allowed for g in groups for _ in range(g.count)])  # (E, E)

        _, store = batch.context(head)
        x = head.block_inputs(tokens.gather(1, pos.clamp(max=t - 1)), is_mask)  # (B, E, H)
        mask = join(context_allowed(starts, t), inner, x.dtype)  # entries see positions < their anchor
        return head(x, pos, mask, store), pos, is_mask, depth

    def loss(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, top-1 agreement) of one batch; see the module docstring."""
        anchors = batch.random_positions(config.anchors, 1, generator)  # (B, A): a token follows each
        groups = self.block_groups(config, head.cfg.mode, len(anchors), generator, anchors.device)
        extra = self.extra_depth1_blocks(config)
        if extra:  # the depth-1 confound matched: as many depth-1 queries as the packed layout gives
            groups.append(prefix_group(head.cfg.mode, torch.zeros(len(anchors), extra, dtype=torch.long), 2, anchors.device))
            anchors = torch.cat([anchors, batch.random_positions(extra, 1, generator)], 1)
        hidden, pos, is_mask, depth = self.run_blocks(head, batch, anchors, groups)
        rows, entries = (is_mask & (pos < batch.lengths[:, None])).nonzero(as_tuple=True)  # (M,), (M,)
        weights = depth_weights(depth[rows, entries], config.decay)
        return batch.distill(head, hidden[rows, entries], rows, pos[rows, entries] - 1, weights, config.loss)

    def heldout_hits(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pass 1 as drafted: all-mask blocks at ``anchors`` positions per sequence; (hit, valid),
        (R, D) each: whether the top-1 at depth d is the target's greedy token there."""
        b, a, n = len(batch.tokens), config.anchors, config.block_size
        anchors = batch.random_positions(a, n - 1, generator)  # (B, A): whole blocks where the sequence allows
        group = prefix_group(head.cfg.mode, torch.zeros(b, a, dtype=torch.long), n, anchors.device)
        hidden, pos, _, _ = self.run_blocks(head, batch, anchors, [group])
        hidden = hidden.view(b, a, n, -1)[:, :, 1:]  # (B, A, D, H): the masks
        pos = pos.view(b, a, n)[:, :, 1:]  # (B, A, D)
        guess = head.to_target(head.logits(hidden).argmax(-1))
        want = batch.argmax.gather(1, (pos - 1).clamp(max=batch.tokens.shape[1] - 1).flatten(1)).view_as(pos)  # target at p + d
        return (guess == want).flatten(0, 1), (pos < batch.lengths[:, None, None]).flatten(0, 1)


DFLASH_TRAINING = BlockTraining(default_head="bidirectional", real_prefix=False)
JETFLOW_TRAINING = BlockTraining(default_head="causal", real_prefix=True)
