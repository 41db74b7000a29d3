"""Draft-tree construction shared by every learned drafter (pure functions, no model).

A drafter supplies, for any path of tokens below the root, the candidate children of the node at
the end of that path (`ChildDist`: the top-K tokens of one draft distribution with their
log-probs, plus the distribution's entropy), or None when it has no distribution there. Every
node is scored

    score(root) = 0
    score(child) = score(parent) + log q(child)                 scoring="logp" (default)
    score(child) = score(parent) + log q(child) - gamma * H(q)  scoring="entropy"

and the tree grows under a node budget (root included) by one of four constructions:

``accum`` (default; the JetSpec authors' "accum_logp" rule): keep a max-heap of *nodes* by score,
starting with the root. Pop the best node; unless it sits at the depth cap (or has no
distribution), add ALL its top-K children at once, in rank order, and push them. When the budget
cannot take all K, the popped node adds only its best ``budget - n`` children. Ties pop the
earlier-added node first. The result is ancestor-closed but not the global k-best set: a popped
node's weak K-th child is added before a better grandchild elsewhere.

``best-first`` (lazy k-best, this suite's extension): both increments are <= 0, so a child never
outranks its parent, and a walk that pops the best *candidate* (then pushes its next-ranked
sibling and its own best child) adds nodes in global score order: exactly the min(budget,
reachable) best nodes, ancestor-closed.

``spine-first``: the greedy chain (rank-0 child at every depth) first, then best-first.

``frontier`` (EAGLE-2's rule, the EAGLE-3 reference code's ``topK_genrate``): explore depth by
depth, expanding only a frontier of the ``top_k`` best nodes per depth: the candidates at depth
d + 1 are the top-K children of the depth-d frontier, and the depth-(d + 1) frontier is their
``top_k`` best (ties: frontier order, then rank). Then keep the best ``budget - 1`` of all
candidates, ancestor-closed (best-first over the explored nodes). A node that outscores every
frontier node's children but whose parent fell off its frontier is never reached, which global
best-first would have reached.

Whatever the construction: parents precede children, siblings carry distinct tokens, no node is
deeper than ``max_depth``, and no node has more than ``fanout`` children.

Worked example (fanout 2, marginals q1 = {a: .6, b: .3}, q2 = {c: .9, d: .05}, budget 4):
    best-first: pop a (-0.51) -> push b (-1.20), a/c (-0.62); pop a/c; pop b
                -> root, a, a/c, b
    accum:      pop root -> add a (-0.51), b (-1.20); pop a -> budget 4 leaves room for one
                child: add a/c (-0.62) only -> root, a, b, a/c
With budget 5, accum adds a/c and a/d (-3.51) when it pops a, before b/c (-1.31): a popped node
brings all its children along, which best-first would not.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from drafters.axes import CONSTRUCTIONS, SCORINGS
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.tree import DraftTree

BUILDERS = ("auto", "tensor", "host")

TokenPath = tuple[int, ...]  # tokens below the root, root excluded; () is the root itself


class ChildDist(NamedTuple):
    """Candidate children of one node: distinct tokens in descending log-prob order.

    A named tuple rather than a frozen dataclass: the host builder makes one per depth (or per known
    node) every drafting step, and a frozen dataclass costs several times as much to construct.
    """

    tokens: tuple[int, ...]  # (K,)
    logps: tuple[float, ...]  # (K,) log q(token), non-increasing
    entropy: float = 0.0  # entropy of the full distribution, nats


@dataclass(frozen=True)
class TreeOptions:
    """How a tree is grown from draft distributions (scoring, construction, fan-out, depth cap)."""

    scoring: str = "logp"  # "logp" (cumulative log-prob) | "entropy" (log-prob minus gamma * entropy)
    construction: str = "accum"  # "accum" (authors' rule) | "best-first" (global k-best) | "spine-first"
    fanout: int = 7  # K: most children per node
    max_depth: int = 15  # D: deepest drafted level (root = depth 0)
    entropy_weight: float = 0.5  # gamma for scoring="entropy", per nat of entropy
    builder: str = "auto"  # "tensor" (batched ops on the device) | "host" (this module) | "auto" (host on a CPU)
    top_k: int = 8  # construction="frontier": nodes expanded per depth (EAGLE's top_k)

    def __post_init__(self) -> None:
        if self.scoring not in SCORINGS:
            raise JfbenchError(f"tree scoring {self.scoring!r} is unknown: choose one of {', '.join(SCORINGS)}")
        if self.construction not in CONSTRUCTIONS:
            raise JfbenchError(
                f"tree construction {self.construction!r} is unknown: choose one of {', '.join(CONSTRUCTIONS)}"
            )
        if self.builder not in BUILDERS:
            raise JfbenchError(f"tree builder {self.builder!r} is unknown: choose one of {', '.join(BUILDERS)}")
        if self.fanout < 1 or self.max_depth < 1 or self.top_k < 1:
            raise JfbenchError(
                f"fanout ({self.fanout}), max depth ({self.max_depth}) and top_k ({self.top_k}) must be at least 1"
            )


def child_dists(logits: torch.Tensor, k: int) -> list[ChildDist]:
    """Top-k children of each row of ``logits`` (R, V) -> R ChildDists (one host transfer)."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (R, V)
    entropy = -(logp.exp() * logp).sum(-1)  # (R,)
    top = logp.topk(min(k, logp.shape[-1]), dim=-1)  # (R, k) each
    return [
        ChildDist(tuple(t), tuple(lp), h)
        for t, lp, h in zip(top.indices.tolist(), top.values.tolist(), entropy.tolist(), strict=True)
    ]


def marginal_lookup(marginals: Sequence[ChildDist]) -> Callable[[TokenPath], ChildDist | None]:
    """Children from per-depth marginals: every node at depth d gets marginals[d] (DFlash-T)."""
    return lambda path: marginals[len(path)] if len(path) < len(marginals) else None


def conditional_lookup(
    conditionals: dict[TokenPath, ChildDist], fallback: Callable[[TokenPath], ChildDist | None]
) -> Callable[[TokenPath], ChildDist | None]:
    """Branch-conditioned children where known, else ``fallback`` (JetFlow rebuild)."""
    return lambda path: conditionals.get(path) or fallback(path)


def level_penalty(dist: ChildDist, options: TreeOptions) -> float:
    """What every child of ``dist`` pays on top of its log-prob: gamma * H under entropy scoring, else 0."""
    return options.entropy_weight * dist.entropy if options.scoring == "entropy" else 0.0


def child_score(parent_score: float, dist: ChildDist, rank: int, options: TreeOptions) -> float:
    """Score of the ``rank``-th child of a node scored ``parent_score`` (see module docstring)."""
    return parent_score + dist.logps[rank] - level_penalty(dist, options)


def build_tree(
    root: int,
    children: Callable[[TokenPath], ChildDist | None],
    budget: int,
    options: TreeOptions,
) -> DraftTree:
    """Grow a tree of at most ``budget`` nodes (root included) from ``children``; see module docstring."""
    if options.construction == "accum":
        return _accum_tree(root, children, budget, options)
    if options.construction == "frontier":
        children = frontier_children(children, budget, options)
    tokens, parents, scores, logps, paths = [root], [-1], [0.0], [0.0], [()]
    heap: list[tuple[float, int, int, int, ChildDist]] = []  # (-score, tie, parent node, rank, dist)
    tie = 0
    fanout = options.fanout

    def dist_of(node: int) -> ChildDist | None:
        return children(paths[node]) if len(paths[node]) < options.max_depth else None

    def score(node: int, dist: ChildDist, rank: int) -> float:
        return child_score(scores[node], dist, rank, options)

    def push(parent: int, dist: ChildDist | None, rank: int) -> None:
        nonlocal tie
        if dist is not None and rank < min(fanout, len(dist.tokens)) and math.isfinite(dist.logps[rank]):
            heapq.heappush(heap, (-score(parent, dist, rank), tie, parent, rank, dist))
            tie += 1

    def add(parent: int, dist: ChildDist, rank: int) -> int:
        node = len(tokens)
        tokens.append(dist.tokens[rank])
        parents.append(parent)
        scores.append(score(parent, dist, rank))
        logps.append(dist.logps[rank])
        paths.append((*paths[parent], dist.tokens[rank]))
        push(parent, dist, rank + 1)  # next-best sibling becomes a candidate
        return node

    if options.construction == "spine-first":
        node, dist = 0, dist_of(0)
        while dist is not None and dist.tokens and len(tokens) < budget:
            node = add(node, dist, 0)
            dist = dist_of(node)
        push(node, dist, 0)
    else:
        push(0, dist_of(0), 0)
    while heap and len(tokens) < budget:
        _, _, parent, rank, dist = heapq.heappop(heap)
        node = add(parent, dist, rank)
        push(node, dist_of(node), 0)
    return DraftTree.trusted(tokens, parents, scores, [len(path) for path in paths], logps)


def _accum_tree(
    root: int, children: Callable[[TokenPath], ChildDist | None], budget: int, options: TreeOptions
) -> DraftTree:
    """The ``accum`` construction (module docstring): a popped node adds all its top-K children.

    The heap holds (-score, node index); node indices grow in insertion order, so equal scores pop
    the earlier-added node first. Children are added whatever their log-prob (a -inf child is
    still a token the target may pick), exactly as the authors' builder does. Only popped nodes
    need their token path (about budget / K of them), so it is walked up from the parents then.
    """
    tokens, parents, scores, logps, depths = [root], [-1], [0.0], [0.0], [0]
    heap: list[tuple[float, int]] = [(0.0, 0)]  # (-score, node)
    while heap and len(tokens) < budget:
        _, node = heapq.heappop(heap)
        depth = depths[node]
        if depth >= options.max_depth:
            continue  # at the depth cap: popped, adds nothing, costs no budget
        dist = children(_path_to(node, tokens, parents))
        if dist is None:
            continue
        base, penalty = scores[node], level_penalty(dist, options)
        for rank in range(min(options.fanout, len(dist.tokens), budget - len(tokens))):
            score = base + dist.logps[rank] - penalty  # = child_score(base, dist, rank, options)
            heapq.heappush(heap, (-score, len(tokens)))
            tokens.append(dist.tokens[rank])
            parents.append(node)
            scores.append(score)
            logps.append(dist.logps[rank])
            depths.append(depth + 1)
    return DraftTree.trusted(tokens, parents, scores, depths, logps)


def frontier_children(
    children: Callable[[TokenPath], ChildDist | None], budget: int, options: TreeOptions
) -> Callable[[TokenPath], ChildDist | None]:
    """``children`` restricted to the per-depth frontiers of the ``frontier`` construction (module
    docstring); best-first over the result keeps the best ``budget - 1`` explored nodes."""
    frontier: list[tuple[float, TokenPath]] = [(0.0, ())]
    expanded: set[TokenPath] = set()
    for _ in range(min(options.max_depth, budget - 1)):  # a frontier at the last depth adds nothing
        candidates = []
        for score, path in frontier:
            dist = children(path)
            if dist is None:
                continue
            expanded.add(path)
            for rank in range(min(options.fanout, len(dist.tokens))):
                if math.isfinite(dist.logps[rank]):
                    candidates.append((child_score(score, dist, rank, options), (*path, dist.tokens[rank])))
        frontier = sorted(candidates, key=lambda c: -c[0])[: options.top_k]  # stable: frontier order, then rank
    return lambda path: children(path) if path in expanded else None


def _path_to(node: int, tokens: list[int], parents: list[int]) -> TokenPath:
    """Tokens below the root down to ``node`` (root excluded)."""
    path = []
    while node > 0:
        path.append(tokens[node])
        node = parents[node]
    return tuple(reversed(path))


def tree_paths(tree: DraftTree) -> list[TokenPath]:
    """Token path (root excluded) of every node, in node order."""
    paths: list[TokenPath] = [()]
    for i in range(1, len(tree)):
        paths.append((*paths[tree.parents[i]], tree.tokens[i]))
    return paths
