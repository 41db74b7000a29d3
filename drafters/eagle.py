"""EAGLE-style autoregressive tree drafter with EAGLE-2 dynamic expansion.

The head's entry for a node is its token embedding fused with the feature of the position before
it: the target's fused feature for the root (the last cached token), the head's own output for
drafted nodes. The output at a node -> LM head -> its children's distribution.

Drafting grows one depth per head forward: at each depth the ``top_k`` frontier candidates with
the best cumulative score are run (tree mask: context + own ancestors), each yields its top-K
children, and those children compete for the next frontier. Finally the explored distributions
feed the shared best-first builder, which keeps the best ``budget - 1`` nodes (ancestor-closed).
Cost grows linearly with depth — the price of path-conditioned drafts.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import torch

from drafters.base import SequenceView
from drafters.checkpoint import HeadInfo
from drafters.head import DraftHead
from drafters.learned import LearnedDrafter, head_depth
from drafters.masks import join
from drafters.tree_builder import ChildDist, Path, TreeOptions, build_tree, child_dists, child_score
from jetflow_bench.errors import JfbenchError
from jetflow_bench.tree import DraftTree


class EagleDrafter(LearnedDrafter):
    """EAGLE-2 dynamic tree; ``depth`` defaults to the head's depth (block_size - 1 of its recipe,
    the depth the block heads draft), so the cap is the same for every learned arm."""

    name = "eagle"
    default_construction = "best-first"  # EAGLE-2 keeps the global best budget - 1 explored nodes

    def __init__(
        self, head: DraftHead, info: HeadInfo, tree: TreeOptions, depth: int | None = None, top_k: int = 8
    ) -> None:
        super().__init__(head, info, tree)
        depth = head_depth(head) if depth is None else depth
        if depth < 1 or top_k < 1:
            raise JfbenchError(f"eagle depth ({depth}) and top-k ({top_k}) must be at least 1")
        self.depth = depth  # head forwards per proposal = deepest drafted level
        self.top_k = top_k  # frontier nodes expanded per depth

    @classmethod
    def check_head(cls, head: DraftHead, info: HeadInfo) -> None:
        if not head.cfg.eagle_input:
            raise JfbenchError(
                f"{info.path} is a block head: the eagle drafter needs a head trained with `jfbench train --drafter eagle`"
            )

    @classmethod
    def max_depth_for(cls, head: DraftHead, options: dict[str, Any]) -> int:
        return options.get("depth") or head_depth(head)

    @torch.inference_mode()
    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        depth = min(self.depth, self.tree.max_depth, budget - 1)
        roots = [s.tokens[-1] for s in seqs]
        if depth < 1:
            return [DraftTree.root_only(r) for r in roots]
        cache = self.require_cache(seqs)
        head, b = self.head, len(seqs)
        device = cache.last_feature.device
        capacity = 1 + (depth - 1) * self.top_k  # entries over all depths
        features = torch.zeros(b, capacity, head.cfg.hidden_size, dtype=cache.last_feature.dtype, device=device)
        sees = torch.zeros(b, capacity, capacity, dtype=torch.bool, device=device)  # entry -> visible entries
        explored: list[dict[Path, ChildDist]] = [{} for _ in seqs]
        # frontier per row: (score, path, parent entry or -1 for the root)
        frontier: list[list[tuple[float, Path, int]]] = [[(0.0, (), -1)] for _ in seqs]
        written = 0
        for level in range(depth):
            n = max(len(f) for f in frontier)
            tokens = torch.zeros(b, n, dtype=torch.long)
            parent = torch.full((b, n), -1, dtype=torch.long)
            for row, nodes in enumerate(frontier):
                for j, (_, path, par) in enumerate(nodes):
                    tokens[row, j] = path[-1] if path else roots[row]
                    parent[row, j] = par
            tokens, parent = tokens.to(device), parent.to(device)
            rows = torch.arange(b, device=device)[:, None]
            parent_feature = torch.where(
                (parent >= 0)[..., None], features[rows, parent.clamp(min=0)], cache.last_feature[:, None]
            )  # (B, n, H)
            own = written + torch.arange(n, device=device)  # (n,) entry index of each frontier node
            sees[:, own] = sees[rows, parent.clamp(min=0)] & (parent >= 0)[..., None]  # ancestors' rows
            sees[:, own, own] = True
            x = head.eagle_inputs(tokens, parent_feature)  # (B, n, H)
            positions = cache.anchor_positions()[:, None] + level  # every frontier node sits at this depth
            mask = join(cache.context_allowed(n), sees[:, own, : written + n], x.dtype)
            out = head(x, positions.expand(b, n), mask, cache.scratch(written, n))  # (B, n, H)
            features[:, own] = out
            dists = child_dists(head.logits(out).flatten(0, 1), self.tree.fanout)  # B * n
            frontier = [
                self._next_frontier(nodes, dists[row * n : row * n + len(nodes)], explored[row], written)
                for row, nodes in enumerate(frontier)
            ]
            written += n
        return [build_tree(r, e.get, budget, self.tree) for r, e in zip(roots, explored, strict=True)]

    def _next_frontier(
        self, nodes: list[tuple[float, Path, int]], dists: list[ChildDist], explored: dict[Path, ChildDist], written: int
    ) -> list[tuple[float, Path, int]]:
        """Record each expanded node's children; the best ``top_k`` children by score come next."""
        children = []
        for j, ((score, path, _), dist) in enumerate(zip(nodes, dists, strict=True)):
            explored[path] = dist
            for rank, token in enumerate(dist.tokens[: self.tree.fanout]):
                children.append((child_score(score, dist, rank, self.tree), (*path, token), written + j))
        return heapq.nlargest(self.top_k, children, key=lambda c: c[0])

    def describe(self) -> dict:
        return {**super().describe(), "depth": self.depth, "top_k": self.top_k}
