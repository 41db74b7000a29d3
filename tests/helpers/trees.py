"""Hand-written drafter distributions and the invariants every draft tree keeps, shared by the tree-builder tests."""

from __future__ import annotations

import math

from drafters.tree_builder import ChildDist, TreeOptions
from jetflow_bench.engine.tree import DraftTree


def dist(**probs: float) -> ChildDist:
    """ChildDist over tokens named by single letters -> ids ord(letter)."""
    ranked = sorted(probs.items(), key=lambda kv: -kv[1])
    return ChildDist(tuple(ord(t) for t, _ in ranked), tuple(math.log(p) for _, p in ranked))


MARGINALS = [dist(a=0.6, b=0.3, c=0.1), dist(d=0.9, e=0.05), dist(f=0.5, g=0.5)]


def names(tree: DraftTree) -> list[str]:
    return [chr(t) if t >= 97 else "R" for t in tree.tokens]


def check_invariants(tree: DraftTree, budget: int, options: TreeOptions) -> None:
    assert len(tree) <= budget
    seen = set()
    for i in range(1, len(tree)):
        assert tree.parents[i] < i  # parents before children (=> ancestor-closed)
        key = (tree.parents[i], tree.tokens[i])
        assert key not in seen, "siblings must carry distinct tokens"
        seen.add(key)
        assert tree.depths[i] <= options.max_depth
    for p in range(len(tree)):
        assert sum(1 for q in tree.parents if q == p) <= options.fanout
