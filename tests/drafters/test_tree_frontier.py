"""The ``frontier`` construction (EAGLE-2/3's per-depth frontier) and linear DFlash, on hand-written
and random distributions (no model).

Bugs these catch: a frontier wider or narrower than ``top_k``, a frontier node's children missing
from the final selection, a node expanded although it fell off its depth's frontier, the tensor
builder ranking a frontier differently from the reference, a chain that is not the greedy one.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from drafters.tree_builder import ChildDist, TokenPath, TreeOptions, build_tree, marginal_lookup, tree_paths
from drafters.tree_ops import Dists, build_trees
from tests.helpers.trees import check_invariants, dist, names

# a .6 / b .35, then d .9 / e .1, then f .7 / g .3 (every node of a depth gets its depth's marginal)
MARGINALS = [dist(a=0.6, b=0.35), dist(d=0.9, e=0.1), dist(f=0.7, g=0.3)]


def frontier(**options) -> TreeOptions:
    return TreeOptions(construction="frontier", **options)


def test_hand_written_frontier_of_one_never_leaves_the_greedy_chain():
    """top_k 1 expands a, a/d only: a/d/g (.162) is taken before b/d (.315), which best-first takes."""
    tree = build_tree(0, marginal_lookup(MARGINALS), 6, frontier(fanout=2, top_k=1))
    assert names(tree) == ["R", "a", "d", "f", "b", "g"]
    assert tree.parents == [-1, 0, 1, 2, 0, 2]
    best = build_tree(0, marginal_lookup(MARGINALS), 6, TreeOptions(construction="best-first", fanout=2))
    assert names(best) == ["R", "a", "d", "f", "b", "d"]  # b/d: b was never on a frontier of one


def test_wide_frontier_is_best_first():
    """A frontier as wide as a depth can be explores every node: the k-best tree."""
    for budget in (2, 4, 7, 15):
        wide = build_tree(0, marginal_lookup(MARGINALS), budget, frontier(fanout=2, top_k=8))
        best = build_tree(0, marginal_lookup(MARGINALS), budget, TreeOptions(construction="best-first", fanout=2))
        assert (wide.tokens, wide.parents) == (best.tokens, best.parents)


def random_children(seed: int, vocab: int = 6):
    """Branch-dependent children: each path gets its own random distribution (distinct log-probs)."""
    cache: dict[TokenPath, ChildDist] = {}

    def children(path: TokenPath) -> ChildDist:
        if path not in cache:
            rng = random.Random(hash((seed, path)))
            probs = sorted((rng.random() + 1e-3 for _ in range(vocab)), reverse=True)
            total = sum(probs)
            tokens = rng.sample(range(vocab), vocab)
            cache[path] = ChildDist(tuple(tokens), tuple(math.log(p / total) for p in probs))
        return cache[path]

    return children


def brute_force_frontier(children, budget: int, fanout: int, top_k: int, max_depth: int) -> list[float]:
    """EAGLE-2 written out: all candidates of each depth, the top_k of them expanded, then the best
    budget - 1 candidates of all depths (their scores, best first)."""
    level, candidates = [(0.0, ())], []
    for _ in range(min(max_depth, budget - 1)):
        below = [(score + lp, (*path, tok)) for score, path in level
                 for tok, lp in list(zip(*children(path)[:2], strict=True))[:fanout]]
        candidates += below
        level = sorted(below, reverse=True)[:top_k]
    return sorted((s for s, _ in candidates), reverse=True)[: budget - 1]


@pytest.mark.parametrize(("budget", "fanout", "top_k", "max_depth"),
                         list(itertools.product([2, 5, 16, 40], [1, 2, 4], [1, 3, 8], [1, 3, 6])))
def test_frontier_matches_brute_force(budget, fanout, top_k, max_depth):
    children = random_children(budget * 1000 + fanout * 100 + top_k * 10 + max_depth)
    options = frontier(fanout=fanout, top_k=top_k, max_depth=max_depth)
    tree = build_tree(0, children, budget, options)
    check_invariants(tree, budget, options)
    want = brute_force_frontier(children, budget, fanout, top_k, max_depth)
    assert sorted(tree.scores[1:], reverse=True) == pytest.approx(want)
    # every node with children in the tree sat on its depth's frontier: at most top_k per depth
    paths = tree_paths(tree)
    parents_by_depth: dict[int, set[TokenPath]] = {}
    for i in range(1, len(tree)):
        parent = paths[tree.parents[i]]
        parents_by_depth.setdefault(len(parent), set()).add(parent)
    assert all(len(p) <= top_k for depth, p in parents_by_depth.items() if depth > 0)


@pytest.mark.parametrize("top_k", [1, 2, 5])
def test_tensor_builder_matches_the_reference(top_k):
    gen = torch.Generator().manual_seed(top_k)
    logits = torch.randn(3, 6, 9, generator=gen) * 3  # (R, D, V)
    logp = torch.log_softmax(logits, -1)
    top = logp.topk(5, dim=-1)
    marginals = Dists(top.indices, top.values, torch.zeros(3, 6))
    roots = torch.tensor([1, 2, 3])
    for budget, fanout, max_depth in itertools.product([2, 9, 33], [1, 3, 5], [2, 6]):
        options = frontier(fanout=fanout, top_k=top_k, max_depth=max_depth)
        got = build_trees(roots, budget, TreeOptions(**{**options.__dict__, "builder": "tensor"}), marginals).to_trees()
        want = build_trees(roots, budget, TreeOptions(**{**options.__dict__, "builder": "host"}), marginals).to_trees()
        for g, w in zip(got, want, strict=True):
            assert (g.tokens, g.parents, g.depths) == (w.tokens, w.parents, w.depths), (budget, fanout, max_depth)


def test_linear_dflash_at_block_size_is_one_greedy_chain():
    """Linear DFlash: fan-out 1 at B = block size (16) drafts the rank-0 token of each of the 15 depths."""
    tokens = torch.arange(15)[None, :, None] + 100  # (1, D, K=1): depth d's best token is 100 + d
    marginals = Dists(tokens, torch.full((1, 15, 1), -0.1), torch.zeros(1, 15))
    for construction in ("accum", "best-first", "frontier"):
        for builder in ("tensor", "host"):
            options = TreeOptions(construction=construction, fanout=1, max_depth=15, builder=builder)
            (tree,) = build_trees(torch.tensor([7]), 16, options, marginals).to_trees()
            assert tree.tokens == [7, *range(100, 115)]
            assert tree.parents == list(range(-1, 15))


def test_construction_is_an_axis_of_every_learned_drafter():
    """`--construction` variants and `NAME[construction=...,top_k=...]` arms reach every learned drafter."""
    from jetflow_bench.sweep.ablation import variants
    from jetflow_bench.sweep.arms import arm_spec
    from jetflow_bench.sweep.grid import DEFAULT_VARIANT

    for name in ("dflash", "jetflow", "jetflow-refine", "eagle", "eagle3"):
        base = arm_spec(name, {}, None, variant=DEFAULT_VARIANT)
        specs = variants(base, {"construction": ["accum", "best-first", "frontier"]}, {})
        assert [dict(s.options)["construction"] for s in specs[1:]] == ["accum", "best-first", "frontier"]
        assert arm_spec(name, {"top_k": 3, "construction": "frontier"}, None).options  # both accepted
    assert arm_spec("eagle", {"construction": "frontier"}, None).variant == "default"  # EAGLE's own rule
    assert arm_spec("eagle3", {"top_k": 10, "fanout": 10, "depth": 8}, None).variant == "default"
    assert arm_spec("eagle3", {"total_tokens": 64}, None).variant == "total_tokens=64"
