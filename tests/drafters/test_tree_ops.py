"""Both `build_trees` builders (tensor ops, `drafters.tree_ops`; host, `drafters.tree_host`)
against the Python reference (`tree_builder.build_tree`).

Bugs these catch: a node chosen or dropped differently (wrong stage width, wrong key order, a
depth cap or -inf child handled differently), the same nodes in another order (parent indices,
tie-breaks), scores summed in another order (float64 differs), a branch-conditioned child looked
up under the wrong path, an accum pop that adds children at the wrong positions; on the host
path, a trie path indexed wrongly (wrong known_ids, so JetFlow files a conditional under another
node) or rows padded so that they change.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from drafters import tree_ops
from drafters.tree_builder import (
    CONSTRUCTIONS,
    ChildDist,
    TreeOptions,
    build_tree,
    conditional_lookup,
    marginal_lookup,
    tree_paths,
)
from drafters.tree_ops import build_trees
from drafters.tree_tensors import Dists, KnownNodes, TreeBatch, top_children
from jetflow_bench.engine.tree import DraftTree, pad_trees


def _child_dist(d: Dists, row: int, slot: int) -> ChildDist:
    return ChildDist(tuple(d.tokens[row, slot].tolist()), tuple(d.logps[row, slot].tolist()),
                     float(d.entropy[row, slot]))


def _random_dists(gen: torch.Generator, rows: int, slots: int, vocab: int, k: int) -> Dists:
    """Peaked and flat distributions mixed (temperatures 0.3 .. 3), as trained heads give."""
    temps = torch.rand(rows, slots, 1, generator=gen) * 2.7 + 0.3
    return top_children(torch.randn(rows, slots, vocab, generator=gen) / temps, k)


def _same(batch: TreeBatch, expected: list[DraftTree]) -> None:
    got = batch.to_trees()
    for row, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.tokens == e.tokens, f"row {row}: tokens differ"
        assert g.parents == e.parents, f"row {row}: parents differ"
        assert g.scores == e.scores, f"row {row}: scores differ"
        assert g.depths == e.depths, f"row {row}: depths differ"


@pytest.fixture(params=["tensor", "tensor-accelerator-branches", "host"])
def builder(request, monkeypatch) -> str:
    """Every test runs on both builders (``auto`` would route this CPU to the host one only), and the
    tensor builder once more with the branches it takes on a GPU (no early stop, every tie round)."""
    if request.param == "tensor-accelerator-branches":
        monkeypatch.setattr(tree_ops, "host_checks_are_free", lambda device: False)
        return "tensor"
    return request.param


CASES = list(itertools.product(CONSTRUCTIONS, [1, 2, 3, 5, 16, 37, 64, 256], [1, 2, 3, 7, 8], [1, 2, 5, 15]))


@pytest.mark.parametrize("construction", CONSTRUCTIONS)
def test_marginal_trees_match_the_reference(construction, builder):
    """DFlash-T / JetFlow pass 1: every node at depth d gets marginal d."""
    gen = torch.Generator().manual_seed(0)
    for _, budget, fanout, max_depth in (c for c in CASES if c[0] == construction):
        depth_slots = int(torch.randint(1, 17, (1,), generator=gen))  # the head may draft less than the cap
        scoring = "entropy" if budget % 2 else "logp"
        options = TreeOptions(builder=builder, scoring=scoring, construction=construction, fanout=fanout, max_depth=max_depth)
        marg = _random_dists(gen, 3, depth_slots, 50, fanout)
        roots = torch.randint(0, 50, (3,), generator=gen)
        expected = [
            build_tree(int(roots[b]), marginal_lookup([_child_dist(marg, b, d) for d in range(depth_slots)]),
                       budget, options)
            for b in range(3)
        ]
        _same(build_trees(roots, budget, options, marginals=marg), expected)


def _known_from(trees: list[DraftTree], dists: Dists, max_depth: int) -> tuple[KnownNodes, list[dict]]:
    """Known nodes = the trees' nodes shallower than ``max_depth``, slot i = node i (as JetFlow queries them)."""
    tokens, parents, depths, valid = pad_trees(trees)
    has = valid & (depths < max_depth)
    known = KnownNodes(parents, tokens, has, dists)
    lookups = []
    for b, tree in enumerate(trees):
        paths = tree_paths(tree)
        lookups.append({paths[u]: _child_dist(dists, b, u) for u in range(len(tree)) if tree.depths[u] < max_depth})
    return known, lookups


@pytest.mark.parametrize("construction", CONSTRUCTIONS)
@pytest.mark.parametrize("fallback", [True, False], ids=["jetflow-refine", "eagle-explored"])
def test_known_node_trees_match_the_reference(construction, fallback, builder):
    """Branch-conditioned children on known paths; elsewhere the marginals (JetFlow) or nothing (EAGLE)."""
    gen = torch.Generator().manual_seed(1)
    for _, budget, fanout, max_depth in (c for c in CASES if c[0] == construction and c[1] > 1):
        scoring = "entropy" if fanout % 2 else "logp"
        options = TreeOptions(builder=builder, scoring=scoring, construction=construction, fanout=fanout, max_depth=max_depth)
        marg = _random_dists(gen, 2, max_depth, 40, fanout)
        roots = torch.randint(0, 40, (2,), generator=gen)
        first = build_trees(roots, budget, options, marginals=marg).to_trees()
        cond = _random_dists(gen, 2, max(len(t) for t in first), 40, fanout)
        known, lookups = _known_from(first, cond, max_depth)
        expected = []
        for b in range(2):
            fall = marginal_lookup([_child_dist(marg, b, d) for d in range(max_depth)])
            children = conditional_lookup(lookups[b], fall) if fallback else lookups[b].get
            expected.append(build_tree(int(roots[b]), children, budget, options))
        got = build_trees(roots, budget, options, marginals=marg if fallback else None, known=known)
        _same(got, expected)
        # known_ids name the trie node of every rebuilt node found there
        paths = [tree_paths(t) for t in first]
        for b, tree in enumerate(got.to_trees()):
            ids = got.known_ids[b, : len(tree)].tolist()
            for u, path in enumerate(tree_paths(tree)):
                assert (ids[u] >= 0) == (path in paths[b]) and (ids[u] < 0 or paths[b][ids[u]] == path)


def test_ties_between_parent_child_and_siblings_follow_the_heap(builder):
    """Zero increments (log q = 0) and equal sibling log-probs: the reference's heap order, kept."""
    logits = torch.full((1, 4, 6), -30.0)
    logits[0, 0, :2] = 0.0  # depth 1: two equally likely tokens
    logits[0, 1, 3] = 30.0  # depth 2: one certain token -> children tie with their parents
    logits[0, 2, 1:3] = 1.0
    logits[0, 3, 4] = 5.0
    marg = top_children(logits, 3)
    for construction, budget in itertools.product(CONSTRUCTIONS, [2, 4, 7, 12]):
        options = TreeOptions(builder=builder, construction=construction, fanout=3, max_depth=4)
        expected = build_tree(9, marginal_lookup([_child_dist(marg, 0, d) for d in range(4)]), budget, options)
        _same(build_trees(torch.tensor([9]), budget, options, marginals=marg), [expected])


def test_rows_are_independent(builder):
    """A batch gives each row the tree it gets alone (no cross-row gather or shared stage width bug)."""
    gen = torch.Generator().manual_seed(2)
    marg = _random_dists(gen, 4, 6, 30, 4)
    roots = torch.arange(4)
    for construction in CONSTRUCTIONS:
        options = TreeOptions(builder=builder, construction=construction, fanout=4, max_depth=6)
        batch = build_trees(roots, 40, options, marginals=marg).to_trees()
        for b in range(4):
            alone = build_trees(roots[b : b + 1], 40, options, marginals=Dists(
                marg.tokens[b : b + 1], marg.logps[b : b + 1], marg.entropy[b : b + 1])).to_trees()[0]
            assert (alone.tokens, alone.parents) == (batch[b].tokens, batch[b].parents)


def test_massive_exact_ties(builder):
    """Logits on a 3-value grid: ties everywhere. accum (and the host builder, which IS the
    reference) stays identical to the reference; the tensor k-best constructions keep a set of the same scores (ties between unrelated branches may be
    ordered differently, see the module docstring), ancestor-closed, parents first."""
    gen = torch.Generator().manual_seed(5)
    for _ in range(40):
        k = int(torch.randint(1, 5, (1,), generator=gen))
        marg = top_children(torch.randint(0, 3, (2, 5, 8), generator=gen).float() * 2.0, k)
        roots = torch.tensor([1, 2])
        for construction, budget in itertools.product(CONSTRUCTIONS, [3, 9, 30, 64]):
            options = TreeOptions(builder=builder, construction=construction, fanout=k, max_depth=5)
            got = build_trees(roots, budget, options, marginals=marg).to_trees()
            for b in range(2):
                want = build_tree(b + 1, marginal_lookup([_child_dist(marg, b, d) for d in range(5)]), budget, options)
                if construction == "accum" or builder == "host":
                    assert (got[b].tokens, got[b].parents) == (want.tokens, want.parents)
                else:
                    assert sorted(got[b].scores) == sorted(want.scores)
                    assert all(p < i for i, p in enumerate(got[b].parents) if i)
