"""EAGLE-style autoregressive tree drafter with EAGLE-2 dynamic expansion.

The head's entry for a node is its token embedding fused with the feature of the position before
it: the target's fused feature for the root (the last cached token), the head's own output for
drafted nodes. The output at a node -> LM head -> its children's distribution.

Drafting grows one depth per head forward: at each depth the frontier (the best candidates by
cumulative score) is run (tree mask: context + own ancestors), each node yields its top-K children,
and those children compete for the next frontier. Finally the explored distributions feed the
shared tree builder. How wide the frontier is follows the construction, so that every construction
builds the tree it builds from full knowledge of the head's distributions:

- ``frontier`` (default, EAGLE-2/3): ``top_k`` per depth; then the best ``budget - 1`` explored nodes.
- ``best-first`` / ``spine-first``: ``budget - 1`` per depth (spine-first keeps the greedy chain
  first), enough to hold every node of the global k-best tree at that depth.
- ``accum``: ceil((budget - 1) / K) per depth, the most nodes it pops.

Cost grows linearly with depth — the price of path-conditioned drafts — and with the frontier's width.

``eagle3`` is the same drafter with the EAGLE-3 reference code's drafting configuration
(SafeAILab/EAGLE, ``eagle/model/ea_model.py`` ``from_pretrained`` defaults ``total_token=60,
depth=7, top_k=10``; ``cnets.py`` ``topK_genrate``): 8 head forwards (the root's, then ``depth``
more), a frontier of 10 nodes with 10 children each, and at most 60 verified tokens, root included.
It reads the heads ``eagle`` reads.

Both read jfbench's own EAGLE heads and published EAGLE-3 heads (SpecForge / vLLM layout,
`drafters.eagle.eagle3`): the checkpoint's layout decides which head is built and how its context is
cached; drafting is the same code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from drafters.eagle.eagle3 import Eagle3Head, PairCache, is_eagle3, load_eagle3
from drafters.head_cache import ContextCache
from drafters.learned import LearnedDrafter
from drafters.timing import span
from drafters.tree_builder import TreeOptions
from drafters.tree_host import trie_index
from drafters.tree_ops import draft_trees
from drafters.tree_tensors import Dists, KnownNodes
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.compiled import buckets_up_to, tree_bucket
from jetflow_bench.engine.drafter import NOT_EXPLORED, OUTSIDE_TOP_K, SequenceView
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.heads.checkpoint import HeadInfo, read_json
from jetflow_bench.heads.head import DraftHead

if TYPE_CHECKING:
    from jetflow_bench.engine.target import TargetRunner


class EagleDrafter(LearnedDrafter):
    """EAGLE-2 dynamic tree; its depth cap (option ``depth``: head forwards per proposal) defaults to
    the head's depth (block_size - 1 of its recipe, the depth the block heads draft), so the cap is
    the same for every learned arm."""

    name = "eagle"
    tree_defaults = {"construction": "frontier"}  # EAGLE-2: top_k per depth, then the best budget - 1 explored
    depth_option = "depth"  # EAGLE's name for the tree's max_depth
    default_total_tokens: int | None = None  # verified tokens per step, root included; None = the budget
    ranks_emitted = True  # `emitted_ranks`, from `explored`
    explored: KnownNodes | None = None  # the last proposal's explored nodes and their children

    @classmethod
    def nominal_counters(cls, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
        """min(depth, B - 1) forwards, one per level: the root's entry, then ``top_k`` per level."""
        defaults = cls.option_defaults()
        depth = options.get(cls.depth_option, defaults[cls.depth_option])
        if depth is None:  # the head's own depth
            if block_size is None:
                return None
            depth = block_size - 1
        passes = min(int(depth), budget - 1)
        return float(passes), float(1 + (passes - 1) * int(options.get("top_k", defaults["top_k"])))

    def __init__(
        self, head: DraftHead, info: HeadInfo, tree: TreeOptions, total_tokens: int | None = default_total_tokens
    ) -> None:
        super().__init__(head, info, tree)
        if total_tokens is not None and total_tokens < 2:
            raise JfbenchError(f"{self.name} total_tokens ({total_tokens}) must be at least 2 (the root and one draft)")
        self.total_tokens = total_tokens

    def frontier_width(self, budget: int) -> int:
        """Nodes expanded per depth under this construction (module docstring)."""
        construction = self.tree.construction
        if construction == "frontier":
            return self.tree.top_k
        if construction == "accum":
            return -(-(budget - 1) // self.tree.fanout)
        return budget - 1

    @classmethod
    def load(cls, checkpoint: Path, target: TargetRunner, attention: str) -> tuple[DraftHead | Eagle3Head, HeadInfo]:  # type: ignore[override]
        """jfbench's own EAGLE head, or a published EAGLE-3 head (SpecForge / vLLM layout)."""
        if is_eagle3(read_json(Path(checkpoint) / "config.json", "pass a head directory")):
            return load_eagle3(checkpoint, target, attention)
        return super().load(checkpoint, target, attention)

    def new_cache(self, seqs: Sequence[SequenceView]) -> ContextCache:
        if isinstance(self.head, Eagle3Head):  # its context entries pair each token with the feature before it
            return PairCache(self.head, [s.request for s in seqs], static=self.static)  # type: ignore[arg-type]
        return super().new_cache(seqs)

    @classmethod
    def check_head(cls, head: DraftHead, info: HeadInfo) -> None:
        if not (head.cfg.eagle_input or isinstance(head, Eagle3Head)):
            raise JfbenchError(
                f"{info.path} is a block head: the eagle drafter needs a head trained with `jfbench train --drafter eagle`"
            )

    def levels(self, budget: int) -> tuple[int, int, int]:
        """(verified budget, head forwards = depth levels, frontier width) of a proposal at ``budget``."""
        budget = min(budget, self.total_tokens or budget)
        return budget, min(self.tree.max_depth, budget - 1), self.frontier_width(budget)  # depth >= 1: budget >= 2

    def static_shapes(self, budget: int) -> tuple[tuple[int, ...], int]:
        """The root's forward (1 entry), then frontiers of at most ``width`` entries, after the levels above."""
        _, depth, width = self.levels(budget)
        return buckets_up_to(width), 1 + (depth - 1) * width + tree_bucket(width)

    @torch.inference_mode()
    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        budget, depth, width = self.levels(budget)
        cache = self.require_cache(seqs)
        head, b = self.head, len(seqs)
        device = cache.last_feature.device
        capacity = 1 + (depth - 1) * width  # entries over all depths
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
        spine = torch.ones(b, 1, dtype=torch.bool, device=device)  # on the greedy chain
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
            out = cache.forward(x, positions.expand(b, n), sees[:, own, : written + n], written)  # (B, n, H)
            features[:, own] = out
            dists = self.children(head.logits(out))  # (B, n, K)
            with span("tree"):
                trie_parent[:, own], trie_token[:, own] = parent, tokens
                explored.record(own, dists)
                tokens, parent, score, spine = self._next_frontier(score, spine, dists, written, width)
            written += n
        with span("tree"):
            known = self.explored = KnownNodes(trie_parent, trie_token, explored.has, explored.store)
            return draft_trees(trie_token[:, 0], budget, self.tree, known=known)

    def emitted_ranks(self, committed: Sequence[Sequence[int]]) -> list[list[int]]:
        """Ranks among the explored nodes' top-K (`Drafter.emitted_ranks`), from the last proposal's trie."""
        known = self.explored
        parents, tokens, has = known.parent.tolist(), known.token.tolist(), known.has_dist.tolist()
        children = known.dists.tokens.tolist()
        ranks = []
        for row, emitted in enumerate(committed):
            index = trie_index(parents[row], tokens[row])
            ranks.append([_rank(index.get(tuple(emitted[:d])), token, has[row], children[row]) for d, token in enumerate(emitted)])
        return ranks

    def _next_frontier(
        self, score: torch.Tensor, spine: torch.Tensor, dists: Dists, first: int, width: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best ``width`` children of the frontier (entries ``first``, ``first + 1``, ...) by score
        (ties: frontier order, then rank; under spine-first the greedy chain's child first) -> their
        tokens, parent entries, scores and spine flags, (B, width) each."""
        b, n, _ = dists.tokens.shape
        fanout = min(self.tree.fanout, dists.k)
        penalty = self.tree.entropy_weight * dists.entropy.double() if self.tree.scoring == "entropy" else 0.0
        child = (score[..., None] + dists.logps[..., :fanout].double()) - (
            penalty[..., None] if torch.is_tensor(penalty) else penalty
        )  # (B, n, K), as `child_score` adds
        on_spine = spine[..., None] & (torch.arange(fanout, device=child.device) == 0)  # (B, n, K)
        key = -child if self.tree.construction != "spine-first" else torch.where(on_spine, -math.inf, -child)
        best = key.reshape(b, -1).sort(dim=-1, stable=True).indices[:, :width]  # (B, width)
        tokens = dists.tokens[..., :fanout].reshape(b, -1).gather(1, best)
        parent = first + best // fanout
        return tokens, parent, child.reshape(b, -1).gather(1, best), on_spine.reshape(b, -1).gather(1, best)


class Eagle3Drafter(EagleDrafter):
    """EAGLE with the EAGLE-3 reference code's drafting configuration (module docstring): depth 7
    after the root's forward (8 drafted levels), top_k 10 frontier nodes with 10 children each, at
    most 60 verified tokens. Same heads as ``eagle``."""

    name = "eagle3"
    trained_as = "eagle"
    tree_defaults = {"construction": "frontier", "top_k": 10, "fanout": 10}
    default_depth = 8  # ea_model.py depth=7: topK_genrate's first forward, then 7 more
    default_total_tokens = 60  # ea_model.py total_token=60: draft tokens + the root

    def __init__(
        self, head: DraftHead, info: HeadInfo, tree: TreeOptions, total_tokens: int | None = default_total_tokens
    ) -> None:
        super().__init__(head, info, tree, total_tokens)


def _rank(node: int | None, token: int, has: list[bool], children: list[list[int]]) -> int:
    """Rank of ``token`` among trie node ``node``'s top-K children (`Drafter.emitted_ranks`' codes)."""
    if node is None or not has[node]:
        return NOT_EXPLORED
    return children[node].index(token) if token in children[node] else OUTSIDE_TOP_K


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
