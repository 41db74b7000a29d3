"""JetFlow: a causal block head drafts a tree; `jetflow-refine` then refines it with branch-conditioned children.

Two arms share one checkpoint (and one class):

- ``jetflow`` — JetFlow as the authors release it (hao-ai-lab/JetSpec): pass 1 only and the
  ``accum`` construction (a popped node adds all its top-K children, K = 7). A released
  JetSpec/DFlash-format causal head drafts here exactly what the authors' inference drafts.
- ``jetflow-refine`` — this suite's extension: ``refine_passes`` (default 1) tree-causal
  refinement passes after pass 1 and the lazy global best-first construction.

1. Pass 1 (as DFlash-T, from a causal head): [anchor, MASK x D] -> per-depth marginals -> tree.
2. Each refinement pass is ONE head forward over the whole tree: every node is an entry holding
   its real token at position p + depth, and every node above the depth cap also gets a MASK
   query (at p + depth + 1) for its children. With the tree-causal mask each entry sees the
   context and its own ancestors only, so the MASK query of node u returns
   q(y | x, h, path to u) — the paper's q(path) = prod_u q(y_u | x, h_x, path_<u). The tree is
   rebuilt best-first from these conditionals (nodes never queried fall back to the pass-1
   marginals), which re-scores every node whose parent was queried. ``refine_passes=0`` skips this.

Worked example of the refinement entries for the tree root -> a -> b (D = 15):

    entry     root   a      b      M(root)  M(a)   M(b)
    parent    -1     0      1      0        1      2
    position  p      p+1    p+2    p+1      p+2    p+3
    sees      root   root,a root,a,b  root,M  root,a,M  root,a,b,M

Training matches this (``jfbench train --drafter jetflow``, packed layout): the true continuation
is laid out as a chain with one MASK query below every node, so each block teaches every
branch-conditioned child distribution at once (see jetflow_bench/training/train_block.py).

Cost: 1 + r head forwards whatever the depth, each over at most 2 x budget entries. A head trained
bidirectionally (``--head diffusion``) runs the same pipeline; it was never trained to read a
path through a tree-causal mask, which is what the ablation measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from drafters.base import SequenceView
from drafters.dflash import DFlashDrafter
from drafters.head_cache import ContextCache
from drafters.masks import join, tree_allowed
from drafters.tree_builder import (
    ChildDist,
    Path,
    TreeOptions,
    build_tree,
    child_dists,
    conditional_lookup,
    marginal_lookup,
    tree_paths,
)
from jetflow_bench.errors import JfbenchError
from jetflow_bench.tree import DraftTree, pad_trees


def refinement_entries(tree: DraftTree, max_depth: int) -> tuple[DraftTree, list[int]]:
    """The tree plus one MASK child per node shallower than ``max_depth``; returns (entries, queried nodes).

    MASK entries carry token 0 (their input is the MASK vector) and follow all real nodes.
    """
    queried = [i for i, d in enumerate(tree.depths) if d < max_depth]
    entries = DraftTree(tree.tokens + [0] * len(queried), tree.parents + queried)
    return entries, queried


class JetFlowDrafter(DFlashDrafter):
    """JetFlow as released: r = 0, ``accum`` (the defaults of `DFlashDrafter`'s tree)."""

    name = "jetflow"
    default_refine_passes: ClassVar[int] = 0

    def __init__(self, head, info, tree: TreeOptions, refine_passes: int | None = None) -> None:
        super().__init__(head, info, tree)
        refine_passes = self.default_refine_passes if refine_passes is None else refine_passes
        if refine_passes < 0:
            raise JfbenchError(f"--refine-passes {refine_passes} must be 0 or more")
        self.refine_passes = refine_passes  # r: tree-causal refinement passes after pass 1

    @torch.inference_mode()
    def conditionals(self, trees: Sequence[DraftTree], cache: ContextCache) -> list[dict[Path, ChildDist]]:
        """One forward over every row's tree -> per row, path of node -> its children's distribution."""
        head = self.head
        built = [refinement_entries(t, self.tree.max_depth) for t in trees]
        tokens, parents, depths, valid = (t.to(cache.last_feature.device) for t in pad_trees([e for e, _ in built]))
        n_nodes = torch.tensor([len(t) for t in trees], device=tokens.device)
        e = tokens.shape[1]
        is_mask = (torch.arange(e, device=tokens.device) >= n_nodes[:, None]) & valid  # (B, E)
        x = head.block_inputs(tokens, is_mask)  # (B, E, H)
        positions = cache.anchor_positions()[:, None] + depths  # (B, E)
        mask = join(cache.context_allowed(e), tree_allowed(parents, depths), x.dtype)
        hidden = head(x, positions, mask, cache.scratch(0, e))  # (B, E, H)
        rows = [(b, len(t) + j) for b, t in enumerate(trees) for j in range(len(built[b][1]))]
        if not rows:
            return [{} for _ in trees]
        index = torch.tensor(rows, device=tokens.device)  # (M, 2)
        dists = iter(child_dists(head.logits(hidden[index[:, 0], index[:, 1]]), self.tree.fanout))
        out = []
        for tree, (_, queried) in zip(trees, built, strict=True):
            paths = tree_paths(tree)
            out.append({paths[u]: next(dists) for u in queried})
        return out

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        if budget == 1:
            return [DraftTree.root_only(s.tokens[-1]) for s in seqs]
        cache = self.require_cache(seqs)
        fallbacks = [marginal_lookup(m) for m in self.marginals(seqs, cache)]
        roots = [s.tokens[-1] for s in seqs]
        trees = [build_tree(r, f, budget, self.tree) for r, f in zip(roots, fallbacks, strict=True)]
        known: list[dict[Path, ChildDist]] = [{} for _ in seqs]
        for _ in range(self.refine_passes):
            for seen, new in zip(known, self.conditionals(trees, cache), strict=True):
                seen.update(new)
            trees = [
                build_tree(r, conditional_lookup(seen, f), budget, self.tree)
                for r, seen, f in zip(roots, known, fallbacks, strict=True)
            ]
        return trees

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        return {**super().option_defaults(), "refine_passes": cls.default_refine_passes}

    def describe(self) -> dict:
        return {**super().describe(), "refine_passes": self.refine_passes}


class JetFlowRefineDrafter(JetFlowDrafter):
    """This suite's extension: one tree-causal refinement pass, lazy global best-first trees.

    It reads the same checkpoints as ``jetflow`` (``trained_as``), so one head serves both arms.
    """

    name = "jetflow-refine"
    trained_as = "jetflow"
    default_refine_passes = 1
    default_construction = "best-first"
