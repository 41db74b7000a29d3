"""The drafters propose exactly what their former pure-Python path proposed, with either tree builder.

The references below are the drafters' previous per-node Python code (dicts of paths, heaps,
per-row loops), kept here verbatim in substance; each drafter now drafts through
`drafters.tree_ops`. Bugs these catch: a refinement entry laid out or masked differently (other
conditionals), a conditional filed under the wrong path, EAGLE's frontier ranked or tied
differently, a tree option (construction, scoring, fan-out) not reaching the device builder.
"""

from __future__ import annotations

import heapq

import pytest
import torch

from drafters import DRAFTERS
from drafters.block.jetflow import refinement_entries
from drafters.tree_builder import (
    ChildDist,
    build_tree,
    child_dists,
    child_score,
    conditional_lookup,
    marginal_lookup,
    tree_paths,
)
from jetflow_bench.engine.tree import DraftTree, pad_trees
from jetflow_bench.heads.masks import tree_allowed
from tests.helpers.heads import observed_cache


def _rows(dists, b: int) -> list[ChildDist]:
    return [ChildDist(tuple(t), tuple(lp), h) for t, lp, h in
            zip(dists.tokens[b].tolist(), dists.logps[b].tolist(), dists.entropy[b].tolist(), strict=True)]


def reference_block(drafter, seqs, budget: int) -> list[DraftTree]:
    """dflash / jetflow: pass-1 marginals, Python trees, r refinement passes with path dicts."""
    cache = drafter.require_cache(seqs)
    marg = drafter.marginals(drafter.roots(seqs, cache), cache)
    fallbacks = [marginal_lookup(_rows(marg, b)) for b in range(len(seqs))]
    roots = [s.tokens[-1] for s in seqs]
    trees = [build_tree(r, f, budget, drafter.tree) for r, f in zip(roots, fallbacks, strict=True)]
    known = [{} for _ in seqs]
    for _ in range(getattr(drafter, "refine_passes", 0)):
        head = drafter.head
        built = [refinement_entries(t, drafter.tree.max_depth) for t in trees]
        tokens, parents, depths, valid = pad_trees([e for e, _ in built])
        n_nodes = torch.tensor([len(t) for t in trees])
        e = tokens.shape[1]
        is_mask = (torch.arange(e) >= n_nodes[:, None]) & valid
        x = head.block_inputs(tokens, is_mask)
        mask = cache.mask(tree_allowed(parents, depths), x.dtype)
        hidden = head(x, cache.anchor_positions()[:, None] + depths, mask, cache.scratch(0, e))
        index = torch.tensor([(b, len(t) + j) for b, t in enumerate(trees) for j in range(len(built[b][1]))])
        dists = iter(child_dists(head.logits(hidden[index[:, 0], index[:, 1]]), drafter.tree.fanout))
        for seen, tree, (_, queried) in zip(known, trees, built, strict=True):
            paths = tree_paths(tree)
            seen.update({paths[u]: next(dists) for u in queried})
        trees = [build_tree(r, conditional_lookup(s, f), budget, drafter.tree)
                 for r, s, f in zip(roots, known, fallbacks, strict=True)]
    return trees


def reference_eagle(drafter, seqs, budget: int) -> list[DraftTree]:
    """EAGLE-2 with a Python frontier (heapq.nlargest) and a dict of explored paths; the frontier is
    as wide as the construction needs (spine-first: the greedy chain's child first)."""
    budget = min(budget, drafter.total_tokens or budget)
    depth = min(drafter.tree.max_depth, budget - 1)
    width = drafter.frontier_width(budget)
    spine_first = drafter.tree.construction == "spine-first"
    roots = [s.tokens[-1] for s in seqs]
    cache = drafter.require_cache(seqs)
    head, b = drafter.head, len(seqs)
    capacity = 1 + (depth - 1) * width
    features = torch.zeros(b, capacity, head.cfg.hidden_size)
    sees = torch.zeros(b, capacity, capacity, dtype=torch.bool)
    explored = [{} for _ in seqs]
    frontier = [[(0.0, (), -1, True)] for _ in seqs]
    written = 0
    for level in range(depth):
        n = max(len(f) for f in frontier)
        tokens = torch.zeros(b, n, dtype=torch.long)
        parent = torch.full((b, n), -1, dtype=torch.long)
        for row, nodes in enumerate(frontier):
            for j, (_, path, par, _) in enumerate(nodes):
                tokens[row, j] = path[-1] if path else roots[row]
                parent[row, j] = par
        rows = torch.arange(b)[:, None]
        parent_feature = torch.where((parent >= 0)[..., None], features[rows, parent.clamp(min=0)],
                                     cache.last_feature[:, None])
        own = written + torch.arange(n)
        sees[:, own] = sees[rows, parent.clamp(min=0)] & (parent >= 0)[..., None]
        sees[:, own, own] = True
        x = head.eagle_inputs(tokens, parent_feature)
        mask = cache.mask(sees[:, own, : written + n], x.dtype)
        out = head(x, (cache.anchor_positions()[:, None] + level).expand(b, n), mask, cache.scratch(written, n))
        features[:, own] = out
        dists = child_dists(head.logits(out).flatten(0, 1), drafter.tree.fanout)
        nxt = []
        for row, nodes in enumerate(frontier):
            children = []
            for j, ((score, path, _, spine), dist) in enumerate(zip(nodes, dists[row * n : row * n + len(nodes)], strict=True)):
                explored[row][path] = dist
                for rank, token in enumerate(dist.tokens[: drafter.tree.fanout]):
                    children.append((child_score(score, dist, rank, drafter.tree), (*path, token), written + j,
                                     spine and rank == 0))
            nxt.append(heapq.nlargest(width, children, key=lambda c: (spine_first and c[3], c[0])))
        frontier = nxt
        written += n
    return [build_tree(r, e.get, budget, drafter.tree) for r, e in zip(roots, explored, strict=True)]


VARIANTS = [
    ("dflash", {}), ("dflash", {"construction": "accum", "fanout": 3}), ("dflash", {"fanout": 1}),
    ("jetflow", {}), ("jetflow", {"construction": "accum"}), ("jetflow", {"refine_passes": 0}),
    ("jetflow", {"refine_passes": 2, "construction": "spine-first", "scoring": "entropy"}),
    ("jetflow-refine", {}), ("jetflow-refine", {"construction": "accum", "fanout": 2}),
    ("eagle", {}), ("eagle", {"construction": "accum", "top_k": 3}), ("eagle", {"scoring": "entropy", "depth": 3}),
    ("eagle", {"construction": "best-first", "depth": 4}), ("eagle", {"construction": "spine-first", "depth": 4}),
    ("eagle3", {}), ("dflash", {"construction": "frontier", "top_k": 2}),
    ("jetflow-refine", {"construction": "frontier", "top_k": 3}),
]


@pytest.mark.parametrize("builder", ["tensor", "host"])
@pytest.mark.parametrize(("name", "options"), VARIANTS)
def test_device_path_matches_the_python_path(target, checkpoints, name, options, builder):  # noqa: F811
    cls = DRAFTERS.get(name)
    drafter = cls.build(target, checkpoints[cls.train_name()], builder=builder, **options)
    drafter.cache, seqs = observed_cache(target, drafter.head)
    reference = reference_eagle if name.startswith("eagle") else reference_block
    with torch.inference_mode():
        for budget in (2, 5, 16, 64):
            got, want = drafter.propose(seqs, budget), reference(drafter, seqs, budget)
            for g, w in zip(got, want, strict=True):
                assert (g.tokens, g.parents, g.depths) == (w.tokens, w.parents, w.depths), (budget, g, w)
                assert g.scores == pytest.approx(w.scores, abs=0, rel=0)
