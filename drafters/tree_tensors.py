"""The tensors the tree builders share: children distributions, known nodes, built trees.

Both builders produce and consume these (`drafters.tree_ops` on the head's device, the reference
builder on the host via `drafters.tree_host`), so they live apart from either.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jetflow_bench.engine.drafter import Dists
from jetflow_bench.engine.tree import DraftTree

_NO_KEY = torch.iinfo(torch.long).max
_TOKEN_SPAN = 1 << 31  # trie keys: parent id * span + token (token ids < 2^31)


def top_children(logits: torch.Tensor, k: int, with_entropy: bool = True) -> Dists:
    """Logits (R, S, V) -> the top-k children of each slot; the same numbers `child_dists` gives.

    ``with_entropy=False`` leaves the entropies at 0: only ``scoring="entropy"`` reads them, and the
    full-vocabulary pass they need is a visible share of a CPU drafting step. One ``topk`` over the
    vocabulary, not a blocked two-stage one: the two stages won in a hot loop on 15 x 4096 rows but
    lost inside a drafting step, where each of their ten small ops runs with cold caches between the
    head's matrix products (measure such cuts in place, with ``jfbench bench drafter``).
    """
    r, s, v = logits.shape
    logp = torch.log_softmax(logits.reshape(r * s, v).float(), dim=-1)  # (R*S, V)
    top = logp.topk(min(k, v), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1) if with_entropy else logp.new_zeros(r * s)  # (R*S,)
    return Dists(top.indices.view(r, s, -1), top.values.view(r, s, -1), entropy.view(r, s))


@dataclass(frozen=True)
class KnownNodes:
    """Explicit nodes with their own children distributions, as a trie per row (node 0 = the root)."""

    parent: torch.Tensor  # (R, T) long, trie index of the parent; -1 for the root and padding
    token: torch.Tensor  # (R, T) long
    has_dist: torch.Tensor  # (R, T) bool: dists slot t holds node t's children
    dists: Dists  # S = T slots, aligned with the nodes

    def lookup(self, parent_id: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """Trie index of the child ``token`` of node ``parent_id`` ((R, C) each), -1 where absent."""
        live = self.parent >= 0
        keys = torch.where(live, self.parent * _TOKEN_SPAN + self.token, _NO_KEY)  # (R, T)
        sorted_keys, order = keys.sort(dim=-1)
        query = torch.where(parent_id >= 0, parent_id * _TOKEN_SPAN + token, -1)  # (R, C)
        at = torch.searchsorted(sorted_keys, query).clamp(max=keys.shape[1] - 1)
        hit = (sorted_keys.gather(1, at) == query) & (parent_id >= 0)
        return torch.where(hit, order.gather(1, at), -1)


@dataclass
class TreeBatch:
    """Trees of a batch, padded to one width; node 0 of each row is its root."""

    tokens: torch.Tensor  # (R, N) long, 0 on padding
    parents: torch.Tensor  # (R, N) long, -1 for the root and padding
    depths: torch.Tensor  # (R, N) long, 0 on padding
    scores: torch.Tensor  # (R, N) float64 cumulative score
    valid: torch.Tensor  # (R, N) bool
    known_ids: torch.Tensor  # (R, N) long: trie index in the `KnownNodes` the tree was built from, -1 if none
    host_trees: list[DraftTree] | None = None  # the rows' trees when the host builder made them

    def to_trees(self) -> list[DraftTree]:
        """The engine's `DraftTree`s: ONE device-to-host transfer for the whole batch."""
        if self.host_trees is not None:
            return self.host_trees
        packed = torch.stack([self.tokens, self.parents, self.depths, self.valid.long()]).cpu()  # (4, R, N)
        tokens, parents, depths, valid = packed.tolist()
        scores = self.scores.cpu().tolist()
        trees = []
        for tok, par, dep, ok, sc in zip(tokens, parents, depths, valid, scores, strict=True):
            n = sum(ok)
            trees.append(DraftTree.trusted(tok[:n], par[:n], sc[:n], dep[:n]))
        return trees
