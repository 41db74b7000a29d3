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

from collections.abc import Sequence

import torch

from drafters.base import SequenceView
from drafters.learned import LearnedDrafter
from drafters.timing import span
from drafters.tree_builder import TreeOptions
from drafters.tree_ops import draft_trees
from drafters.tree_tensors import Dists, KnownNodes
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.errors import JfbenchError
from jetflow_bench.heads.checkpoint import HeadInfo
from jetflow_bench.heads.head import DraftHead


class EagleDrafter(LearnedDrafter):
    """EAGLE-2 dynamic tree; its depth cap (option ``depth``: head forwards per proposal) defaults to
    the head's depth (block_size - 1 of its recipe, the depth the block heads draft), so the cap is
    the same for every learned arm."""

    name = "eagle"
    default_construction = "best-first"  # EAGLE-2 keeps the global best budget - 1 explored nodes
    training = "drafters.eagle_training:EAGLE_TRAINING"
    depth_option = "depth"  # EAGLE's name for the tree's max_depth

    def __init__(self, head: DraftHead, info: HeadInfo, tree: TreeOptions, top_k: int = 8) -> None:
        super().__init__(head, info, tree)
        if top_k < 1:
            raise JfbenchError(f"eagle top-k ({top_k}) must be at least 1")
        self.top_k = top_k  # frontier nodes expanded per depth

    @classmethod
    def check_head(cls, head: DraftHead, info: HeadInfo) -> None:
        if not head.cfg.eagle_input:
            raise JfbenchError(
                f"{info.path} is a block head: the eagle drafter needs a head trained with `jfbench train --drafter eagle`"
            )

    @torch.inference_mode()
    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        depth = min(self.tree.max_depth, budget - 1)  # >= 1: budget >= 2, max_depth >= 1
        cache = self.require_cache(seqs)
        head, b = self.head, len(seqs)
        device = cache.last_feature.device
        capacity = 1 + (depth - 1) * self.top_k  # entries over all depths
        features = torch.zeros(b, capacity, head.cfg.hidden_size, dtype=cache.last_feature.dtype, device=device)
        sees = torch.zeros(b, capacity, capacity, dtype=torch.bool, device=device)  # entry -> visible entries
        # Explored nodes = the head's entries (entry index = trie index; entry 0 is the root).
        trie_parent = torch.full((b, capacity), -1, dtype=torch.long, device=device)
        trie_token = torch.zeros(b, capacity, dtype=torch.long, device=device)
        explored = _Explored(b, capacity)
        # The frontier, (B, n) each: token, parent entry (-1 for the root), cumulative score.
        tokens = torch.tensor([s.tokens[-1] for s in seqs], device=device)[:, None]
        parent = torch.full((b, 1), -1, dtype=torch.long, device=device)
        score = torch.zeros(b, 1, dtype=torch.float64, device=device)
        rows = torch.arange(b, device=device)[:, None]
        anchors = cache.anchor_positions()[:, None]  # (B, 1)
        written = 0
        for level in range(depth):
            n = tokens.shape[1]
            own = slice(written, written + n)  # entries of this frontier (they follow the levels above)
            if level == 0:  # the root: its input feature is the target's, it sees no entry but itself
                parent_feature = cache.last_feature[:, None]  # (B, 1, H)
            else:  # every frontier node's parent is an entry of the level above
                parent_feature = features[rows, parent]  # (B, n, H)
                sees[:, own] = sees[rows, parent]  # ancestors' rows
            sees[:, own].diagonal(written, 1, 2).fill_(True)  # and itself
            x = head.eagle_inputs(tokens, parent_feature)  # (B, n, H)
            positions = anchors + level  # every frontier node sits at this depth
            mask = cache.mask(sees[:, own, : written + n], x.dtype)  # rows of this level: never written again
            out = head(x, positions.expand(b, n), mask, cache.scratch(written, n))  # (B, n, H)
            features[:, own] = out
            dists = self.children(head.logits(out))  # (B, n, K)
            with span("tree"):
                trie_parent[:, own], trie_token[:, own] = parent, tokens
                explored.record(own, dists)
                tokens, parent, score = self._next_frontier(score, dists, written)
            written += n
        with span("tree"):
            known = KnownNodes(trie_parent, trie_token, explored.has, explored.store)
            return draft_trees(trie_token[:, 0], budget, self.tree, known=known)

    def _next_frontier(
        self, score: torch.Tensor, dists: Dists, first: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best ``top_k`` children of the frontier (entries ``first``, ``first + 1``, ...) by score
        (ties: frontier order, then rank) -> their tokens, parent entries and scores, (B, top_k) each."""
        b, n, _ = dists.tokens.shape
        fanout = min(self.tree.fanout, dists.k)
        penalty = self.tree.entropy_weight * dists.entropy.double() if self.tree.scoring == "entropy" else 0.0
        child = (score[..., None] + dists.logps[..., :fanout].double()) - (
            penalty[..., None] if torch.is_tensor(penalty) else penalty
        )  # (B, n, K), as `child_score` adds
        best = (-child.reshape(b, -1)).sort(dim=-1, stable=True).indices[:, : self.top_k]  # (B, top_k)
        tokens = dists.tokens[..., :fanout].reshape(b, -1).gather(1, best)
        parent = first + best // fanout
        return tokens, parent, child.reshape(b, -1).gather(1, best)


class _Explored:
    """Children distributions of the expanded entries (B, capacity, K), filled level by level."""

    def __init__(self, rows: int, capacity: int) -> None:
        self.rows, self.capacity = rows, capacity
        self.has: torch.Tensor | None = None  # (B, capacity) bool
        self.store: Dists | None = None

    def record(self, entries: slice, dists: Dists) -> None:
        if self.store is None:  # K = the heads' top-k width, min(fanout, vocab)
            shape, device = (self.rows, self.capacity), dists.tokens.device
            self.has = torch.zeros(shape, dtype=torch.bool, device=device)
            self.store = Dists(dists.tokens.new_zeros(*shape, dists.k), dists.logps.new_zeros(*shape, dists.k),
                               dists.entropy.new_zeros(shape))
        self.has[:, entries] = True
        self.store.tokens[:, entries] = dists.tokens
        self.store.logps[:, entries] = dists.logps
        self.store.entropy[:, entries] = dists.entropy
