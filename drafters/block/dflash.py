"""DFlash-T: one pass of a block head over [anchor, MASK x D] -> per-depth marginals -> tree.

Each MASK at position p+d predicts its own token ("in place"), so the pass yields marginals
q_1..q_D that do not depend on the branch a node sits on: every node at depth d gets the same
top-K candidate children. The tree is grown with the same construction as ``jetflow`` (``accum``
by default), so the two arms differ only in the head. With ``fanout=1`` and budget = block size this
is linear DFlash. The in-block attention mode (bidirectional for DFlash heads, causal for JetFlow heads)
comes from the checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from drafters.head_cache import ContextCache
from drafters.learned import LearnedDrafter
from drafters.timing import span
from drafters.tree_builder import TreeOptions
from drafters.tree_ops import draft_trees
from drafters.tree_tensors import Dists
from jetflow_bench.engine.compiled import tree_bucket
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.heads.masks import block_allowed, block_layout


class DFlashDrafter(LearnedDrafter):
    name = "dflash"
    pass1: Dists | None = None  # the last proposal's marginals (`last_marginals`)

    @classmethod
    def nominal_counters(cls, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
        """One forward over the block: anchor + block - 1 MASK positions."""
        return None if block_size is None else (1.0, float(block_size))

    @torch.inference_mode()
    def marginals(self, anchors: torch.Tensor, cache: ContextCache) -> Dists:
        """Pass 1: the top-K candidates of q_1..q_D for every row (anchors (B,): `roots`), (B, D, K),
        from one head forward."""
        head = self.head
        n = head.cfg.block_size  # anchor + D masks
        offsets, is_mask = block_layout(n, cache.last_feature.device)  # (n,) each
        x = head.block_inputs(anchors[:, None].expand(-1, n), is_mask.expand(len(anchors), n))  # (B, n, H)
        positions = cache.anchor_positions()[:, None] + offsets  # (B, n)
        hidden = cache.forward(x, positions, block_allowed(head.cfg.mode, 1, n, offsets.device))  # (B, n, H)
        return self.children(head.logits(hidden[:, 1:]))  # (B, D, K)

    def static_shapes(self, budget: int) -> tuple[tuple[int, ...], int]:
        """Pass 1: one block of ``block_size`` entries."""
        width = tree_bucket(self.head.cfg.block_size)
        return (width,), width

    def roots(self, seqs: Sequence[SequenceView], cache: ContextCache) -> torch.Tensor:
        """(B,) last committed token of each row, on the head's device."""
        return torch.tensor([s.tokens[-1] for s in seqs], device=cache.last_feature.device)

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        cache = self.require_cache(seqs)
        roots = self.roots(seqs, cache)
        marginals = self.pass1 = self.marginals(roots, cache)
        with span("tree"):
            return draft_trees(roots, budget, self.tree, marginals=marginals)

    def replay_tree(self) -> TreeOptions | None:
        """Pass 1's marginals and the tree options are all its tree depends on."""
        return self.tree

    def last_marginals(self) -> Dists | None:
        return self.pass1
