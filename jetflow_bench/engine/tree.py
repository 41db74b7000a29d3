"""Draft trees and the index arithmetic on them (pure functions, no model).

A tree is stored flat in topological order (every parent before its children). Node 0 is the
root: the last committed token, whose KV is not yet in the target's cache. Budget B = number of
nodes, root included (docs/methodology.md), so B = 1 is plain decoding.

Worked example — root "The", two children "cat"/"dog", "cat" has child "sat":

    index   0     1     2     3
    token   The   cat   dog   sat
    parent  -1    0     0     1
    depth   0     1     1     2

    ancestor mask (row = query node, True = may attend):
        0: [1 0 0 0]
        1: [1 1 0 0]
        2: [1 0 1 0]     <- "dog" never sees its sibling "cat"
        3: [1 1 0 1]
    positions = committed_len + depth = L+0, L+1, L+1, L+2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    """One sequence's candidate tree, flat and topologically ordered."""

    tokens: list[int]  # (N,) token id per node; tokens[0] is the root
    parents: list[int]  # (N,) parent index, -1 for the root; parents[i] < i
    scores: list[float] = field(default_factory=list)  # (N,) drafter score (e.g. cumulative log-prob)
    # (N,) log q(token | parent's path): the draft probability of each proposed child, 0.0 (log 1)
    # for the root and for children a drafter lists without a distribution (n-gram); None when the
    # builder did not record them (`trusted`). Children are verified as a deterministic list, so
    # these do not enter acceptance (speculative_sampling).
    draft_logps: list[float] | None = field(default_factory=list)
    depths: list[int] = field(init=False)  # (N,) root = 0

    def __post_init__(self) -> None:
        if not self.tokens or self.parents[0] != -1:
            raise ValueError("a draft tree needs a root at index 0 with parent -1")
        if len(self.parents) != len(self.tokens):
            raise ValueError("tokens and parents must have the same length")
        if not self.scores:
            self.scores = [0.0] * len(self.tokens)
        if self.draft_logps is not None and not self.draft_logps:
            self.draft_logps = [0.0] * len(self.tokens)
        if len(self.scores) != len(self.tokens) or len(self.draft_logps or self.tokens) != len(self.tokens):
            raise ValueError("scores and draft_logps need one value per node")
        depths = [0] * len(self.tokens)
        for i in range(1, len(self.tokens)):
            p = self.parents[i]
            if not 0 <= p < i:
                raise ValueError(f"node {i} has parent {p}: parents must come before children")
            depths[i] = depths[p] + 1
        self.depths = depths

    @classmethod
    def trusted(
        cls, tokens: list[int], parents: list[int], scores: list[float], depths: list[int],
        draft_logps: list[float] | None = None,
    ) -> DraftTree:
        """A tree from a builder that already knows its depths: no O(N) Python pass to check it.

        ``draft_logps`` None: the builder did not record them (the device builder).
        """
        tree = cls.__new__(cls)
        tree.tokens, tree.parents, tree.scores, tree.depths = tokens, parents, scores, depths
        tree.draft_logps = draft_logps
        return tree

    @classmethod
    def root_only(cls, token: int) -> DraftTree:
        return cls([token], [-1])

    @classmethod
    def chain(cls, tokens: Sequence[int]) -> DraftTree:
        """A linear draft: tokens[0] is the root, each next token the child of the previous."""
        return cls(list(tokens), list(range(-1, len(tokens) - 1)))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths)

    def prefix(self, n: int) -> DraftTree:
        """The first ``n`` nodes (ancestor-closed: parents precede children). For trees built in
        budget-independent order (accum, best-first, spine-first) this is the tree budget n builds."""
        if n >= len(self.tokens):
            return self
        return DraftTree(self.tokens[:n], self.parents[:n], self.scores[:n])

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to ``node`` inclusive."""
        path = []
        while node != -1:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def pad_trees(
    trees: Sequence[DraftTree], pad_token: int = 0, min_width: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack ragged trees into padded tensors, at least ``min_width`` nodes wide.

    Returns tokens, parents, depths (each (B, N_max) long) and valid (B, N_max) bool. Padding nodes
    get parent -1 and depth 0, and are masked out of everything by ``valid``.
    """
    n_max = max(min_width, *(len(t) for t in trees))
    # One tensor construction per field from padded Python lists (per-row tensors cost more).
    tokens = torch.tensor([t.tokens + [pad_token] * (n_max - len(t)) for t in trees], dtype=torch.long)
    parents = torch.tensor([t.parents + [-1] * (n_max - len(t)) for t in trees], dtype=torch.long)
    depths = torch.tensor([t.depths + [0] * (n_max - len(t)) for t in trees], dtype=torch.long)
    valid = torch.tensor([[True] * len(t) + [False] * (n_max - len(t)) for t in trees], dtype=torch.bool)
    return tokens, parents, depths, valid


def ancestor_mask(parents: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
    """(B, N, N) bool: entry [b, i, j] is True iff node j is node i or one of its ancestors.

    Built one depth level at a time (a node's row = its parent's row + itself), so the cost is
    O(depth) tensor ops rather than O(nodes). Padding nodes (parent -1, depth 0) see only themselves.
    """
    b, n = parents.shape
    eye = torch.eye(n, dtype=torch.bool, device=parents.device).expand(b, n, n).clone()
    anc = eye
    max_depth = int(depths.max()) if depths.numel() else 0
    batch_idx = torch.arange(b, device=parents.device)[:, None].expand(b, n)
    for d in range(1, max_depth + 1):
        at_depth = depths == d  # (B, N)
        if not at_depth.any():
            continue
        bi, ni = batch_idx[at_depth], torch.nonzero(at_depth, as_tuple=True)[1]
        anc[bi, ni] = anc[bi, parents[at_depth]] | eye[bi, ni]
    return anc


def matched_nodes(tree: DraftTree, continuation: Sequence[int]) -> list[int]:
    """Node indices, root excluded, of the one path whose tokens spell ``continuation`` from its start.

    Siblings carry distinct tokens, so at most one node per depth matches; parents precede children,
    so the nodes of the tree's first b nodes on that path are its first ones (a prefix of the list).
    """
    matched, depth, path = {0}, tree.depths, []
    for node in range(1, len(tree)):
        d = depth[node]
        if tree.parents[node] in matched and d <= len(continuation) and tree.tokens[node] == continuation[d - 1]:
            matched.add(node)
            path.append(node)
    return path


def emitted(accepted: int, left: int) -> int:
    """Tokens a step emits: the accepted drafts plus the bonus, cut at the request's end (``left``
    tokens of the output remained), as the engine's stop rule cuts its final step."""
    return min(accepted + 1, left)
