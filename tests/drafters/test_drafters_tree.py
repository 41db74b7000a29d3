"""The shared tree builder on hand-written distributions (no model)."""

from __future__ import annotations

import math

import pytest

from drafters.block.jetflow import refinement_entries
from drafters.tree_builder import (
    ChildDist,
    TreeOptions,
    build_tree,
    conditional_lookup,
    marginal_lookup,
    tree_paths,
)
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.tree import ancestor_mask, pad_trees
from tests.helpers.trees import MARGINALS, check_invariants, dist, names


def best_first(**options) -> TreeOptions:
    """The lazy global best-first construction (jetflow-refine's and EAGLE's)."""
    return TreeOptions(construction="best-first", **options)


def test_docstring_example_best_first_order():
    tree = build_tree(0, marginal_lookup(MARGINALS), 4, best_first(fanout=2))
    assert names(tree) == ["R", "a", "d", "b"]
    assert tree.parents == [-1, 0, 1, 0]
    assert tree.scores[2] == pytest.approx(math.log(0.6) + math.log(0.9))


@pytest.mark.parametrize("budget", [1, 2, 5, 9, 40, 200])
@pytest.mark.parametrize("fanout", [1, 2, 3])
def test_best_first_returns_min_budget_reachable(budget, fanout):
    options = best_first(fanout=fanout, max_depth=3)
    tree = build_tree(0, marginal_lookup(MARGINALS), budget, options)
    widths = [min(fanout, len(m.tokens)) for m in MARGINALS]
    reachable = 1 + widths[0] + widths[0] * widths[1] + widths[0] * widths[1] * widths[2]
    assert len(tree) == min(budget, reachable)
    check_invariants(tree, budget, options)
    # optimality by brute force: the tree's nodes are the budget − 1 best-scoring reachable nodes
    best = sorted(all_reachable_scores(MARGINALS, fanout, options.max_depth), reverse=True)[: budget - 1]
    assert sorted(tree.scores[1:], reverse=True) == pytest.approx(best)


def all_reachable_scores(marginals: list[ChildDist], fanout: int, max_depth: int) -> list[float]:
    """Cumulative log-prob of every node reachable under the fan-out and depth caps (brute force).

    Log-probs only fall along a path, so the k best of these always form an ancestor-closed set.
    """
    level, scores = [0.0], []
    for depth in range(min(max_depth, len(marginals))):
        top = marginals[depth].logps[:fanout]
        level = [s + lp for s in level for lp in top]
        scores += level
    return scores


def test_brute_force_helper_counts_every_node():
    scores = all_reachable_scores(MARGINALS, 2, 3)
    assert len(scores) == 2 + 2 * 2 + 2 * 2 * 2
    assert max(scores) == pytest.approx(math.log(0.6))


def test_fanout_one_is_the_greedy_chain():
    tree = build_tree(0, marginal_lookup(MARGINALS), 16, TreeOptions(fanout=1))
    assert names(tree) == ["R", "a", "d", "f"]
    assert tree.parents == [-1, 0, 1, 2]


def test_max_depth_caps_the_tree():
    tree = build_tree(0, marginal_lookup(MARGINALS), 100, TreeOptions(fanout=3, max_depth=1))
    assert names(tree) == ["R", "a", "b", "c"]


def test_spine_first_lays_the_greedy_chain_first():
    options = TreeOptions(fanout=2, construction="spine-first")
    tree = build_tree(0, marginal_lookup(MARGINALS), 5, options)
    assert names(tree)[:4] == ["R", "a", "d", "f"]
    assert names(tree)[4] == "b"  # b (.3) beats a/d/g (.6 * .9 * .5 = .27)
    check_invariants(tree, 5, options)


def test_entropy_scoring_discounts_uncertain_levels():
    flat = ChildDist((1, 2), (math.log(0.5), math.log(0.5)), entropy=math.log(2))
    sharp = ChildDist((3, 4), (math.log(0.45), math.log(0.05)), entropy=0.2)
    children = {(): ChildDist((5, 6), (math.log(0.5), math.log(0.5)), entropy=0.0), (5,): flat, (6,): sharp}
    logp = build_tree(0, children.get, 4, best_first(fanout=2))
    entropy = build_tree(0, children.get, 4, best_first(fanout=2, scoring="entropy", entropy_weight=1.0))
    assert logp.tokens == [0, 5, 6, 1]  # .5*.5 beats .5*.45
    assert entropy.tokens == [0, 5, 6, 3]  # flat level pays log(2), sharp level only 0.2


def test_bad_options_are_user_errors():
    with pytest.raises(JfbenchError, match="scoring"):
        TreeOptions(scoring="magic")
    with pytest.raises(JfbenchError, match="construction"):
        TreeOptions(construction="random")


def test_refinement_changes_children_only_through_conditioning():
    options = best_first(fanout=2)
    base = marginal_lookup(MARGINALS)
    first = build_tree(0, base, 8, options)
    paths = tree_paths(first)
    # conditionals equal to the marginals: the rebuild is the same tree
    same = {p: MARGINALS[len(p)] for p in paths if len(p) < len(MARGINALS)}
    assert build_tree(0, conditional_lookup(same, base), 8, options) == first
    # a different conditional below "a": only a's children change; "b" keeps marginal children
    changed = {**same, (ord("a"),): dist(x=0.7, y=0.2)}
    rebuilt = build_tree(0, conditional_lookup(changed, base), 8, options)
    rebuilt_paths = tree_paths(rebuilt)
    below_a = sorted(chr(p[1]) for p in rebuilt_paths if len(p) == 2 and p[0] == ord("a"))
    below_b = sorted(chr(p[1]) for p in rebuilt_paths if len(p) == 2 and p[0] == ord("b"))
    assert "x" in below_a and set(below_a) <= {"x", "y"}  # never the marginal candidates d, e
    assert set(below_b) <= {"d", "e"}
    check_invariants(rebuilt, 8, options)


def test_refinement_entries_never_see_siblings_or_descendants():
    tree = build_tree(0, marginal_lookup(MARGINALS), 7, TreeOptions(fanout=2, max_depth=3))
    entries, queried = refinement_entries(tree, max_depth=2)
    assert queried == [i for i, d in enumerate(tree.depths) if d < 2]
    _, parents, depths, _ = pad_trees([entries])
    sees = ancestor_mask(parents, depths)[0]
    for i in range(len(entries)):
        for j in range(len(entries)):
            if sees[i, j]:
                assert j in entries.path_to(i), "an entry may only see itself and its ancestors"
    for k, u in enumerate(queried):  # each MASK query sits one level below its node and sees its path
        m = len(tree) + k
        assert entries.depths[m] == tree.depths[u] + 1
        assert sees[m].nonzero().flatten().tolist() == sorted([*tree.path_to(u), m])
