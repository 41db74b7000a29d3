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

Training: ``jfbench train --drafter jetflow`` trains pass 1 as the authors' recipe does (all-mask
blocks, causal: DFlash's training with the mask changed); ``--drafter jetflow-refine`` trains the
same family of head with the packed layout, which matches the refinement entries: the true
continuation laid out as a chain with one MASK query below every node, so each block teaches every
branch-conditioned child distribution at once (see drafters/block/training.py). Either arm reads
either head.

Cost: 1 + r head forwards whatever the depth, each over at most 2 x budget entries. A head trained
bidirectionally (``--head bidirectional``) runs the same pipeline; it was never trained to read a
path through a tree-causal mask, which is what the ablation measures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from drafters.block.dflash import DFlashDrafter
from drafters.head_cache import ContextCache
from drafters.timing import span
from drafters.tree_builder import TreeOptions
from drafters.tree_ops import build_trees
from drafters.tree_tensors import Dists, KnownNodes, TreeBatch
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.compiled import TREE_BUCKETS, buckets_up_to, check_compiled_budget
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.heads.masks import tree_allowed


def refinement_entries(tree: DraftTree, max_depth: int) -> tuple[DraftTree, list[int]]:
    """The tree plus one MASK child per node shallower than ``max_depth``; returns (entries, queried nodes).

    MASK entries carry token 0 (their input is the MASK vector) and follow all real nodes. (One
    tree in Python: the reference `batched_refinement_entries` is tested against.)
    """
    queried = [i for i, d in enumerate(tree.depths) if d < max_depth]
    entries = DraftTree(tree.tokens + [0] * len(queried), tree.parents + queried)
    return entries, queried


def batched_refinement_entries(trees: TreeBatch, max_depth: int) -> tuple[torch.Tensor, ...]:
    """`refinement_entries` for every row at once, padded as `pad_trees` pads: each row's tree plus one MASK child per node shallower than ``max_depth``, batched.

    Row b holds its n_b nodes, then its q_b MASK entries in node order, then padding (parent -1,
    depth 0), the width being the widest row; MASK entries carry token 0 (their input is the MASK
    vector). Returns tokens, parents, depths, is_mask (each (B, E)) and where (B, N): the entry
    of node i's MASK query, -1 when it has none.

    Worked example, nodes root, a (child of root), b (child of a), D = 2 (b is at the cap):
        entry   0 root  1 a  2 b  3 M(root)  4 M(a)
        parent  -1      0    1    0          1          where = [3, 4, -1]
    """
    b, n = trees.valid.shape
    device = trees.valid.device
    queried = trees.valid & (trees.depths < max_depth)  # (B, N)
    n_nodes = trees.valid.sum(1, keepdim=True)  # (B, 1)
    where = torch.where(queried, n_nodes + queried.cumsum(1) - 1, -1)  # (B, N)
    width = int((n_nodes[:, 0] + queried.sum(1)).max())  # one small sync: the forward's width
    node = torch.arange(n, device=device).expand(b, n)
    into = torch.cat([torch.where(trees.valid, node, width), torch.where(queried, where, width)], 1)  # (B, 2N)
    tokens = torch.zeros(b, width + 1, dtype=torch.long, device=device)
    parents = torch.full((b, width + 1), -1, dtype=torch.long, device=device)
    depths = torch.zeros(b, width + 1, dtype=torch.long, device=device)
    tokens.scatter_(1, into, torch.cat([trees.tokens, torch.zeros_like(trees.tokens)], 1))
    parents.scatter_(1, into, torch.cat([trees.parents, node], 1))
    depths.scatter_(1, into, torch.cat([trees.depths, trees.depths + 1], 1))
    is_mask = torch.zeros(b, width + 1, dtype=torch.bool, device=device)
    is_mask.scatter_(1, into, torch.cat([torch.zeros_like(queried), queried], 1))
    return tokens[:, :width], parents[:, :width], depths[:, :width], is_mask[:, :width], where


def merge_known(known: KnownNodes | None, trees: TreeBatch, asked: torch.Tensor, answers: Dists) -> KnownNodes:
    """The known nodes after a refinement pass: the trees' nodes join (a path met again keeps one
    node), and every asked node's distribution is the new one (the reference's ``dict.update``).

    asked (B, N) bool: nodes whose MASK query ran; answers: their distributions, slot = tree node.
    """
    b, n = trees.valid.shape
    device = trees.valid.device
    if known is None:
        return KnownNodes(trees.parents, trees.tokens, asked, answers)
    t = known.parent.shape[1]
    fresh = trees.valid & (trees.known_ids < 0)
    slot = torch.where(fresh, t + torch.arange(n, device=device), trees.known_ids.clamp(min=0))  # (B, N)
    slot = torch.where(trees.valid, slot, t + n)  # padding -> a dropped column
    parent = torch.cat([known.parent, torch.full((b, n + 1), -1, dtype=torch.long, device=device)], 1)
    token = torch.cat([known.token, torch.zeros(b, n + 1, dtype=torch.long, device=device)], 1)
    tree_parent = torch.where(trees.parents >= 0, slot.gather(1, trees.parents.clamp(min=0)), -1)
    parent.scatter_(1, torch.where(fresh, slot, t + n), tree_parent)
    token.scatter_(1, torch.where(fresh, slot, t + n), trees.tokens)
    has = torch.cat([known.has_dist, torch.zeros(b, n + 1, dtype=torch.bool, device=device)], 1)
    to = torch.where(asked, slot, t + n)
    has.scatter_(1, to, torch.ones_like(asked))
    k = answers.k

    def put(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        grown = torch.cat([old, old.new_zeros(b, n + 1, *old.shape[2:])], 1)
        index = to if old.dim() == 2 else to[..., None].expand(b, n, k)
        return grown.scatter_(1, index, new)[:, : t + n]

    dists = Dists(put(known.dists.tokens, answers.tokens), put(known.dists.logps, answers.logps),
                  put(known.dists.entropy, answers.entropy))
    return KnownNodes(parent[:, : t + n], token[:, : t + n], has[:, : t + n], dists)


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
    def conditionals(self, trees: TreeBatch, cache: ContextCache) -> tuple[torch.Tensor, Dists]:
        """One forward over every row's tree -> (asked (B, N): nodes that got a MASK query,
        their children's distributions (B, N, K), slot = tree node)."""
        head = self.head
        with span("tree"):
            tokens, parents, depths, is_mask, where = batched_refinement_entries(trees, self.tree.max_depth)
        x = head.block_inputs(tokens, is_mask)  # (B, E, H)
        positions = cache.anchor_positions()[:, None] + depths  # (B, E)
        hidden = cache.forward(x, positions, tree_allowed(parents, depths))  # (B, E, H)
        asked = where >= 0  # (B, N)
        queries = hidden.gather(1, where.clamp(min=0)[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, N, H)
        found = self.children(head.logits(queries[asked])[None])  # (1, M, K): asked rows only
        b, n = asked.shape
        k = found.k
        tok = torch.zeros(b, n, k, dtype=torch.long, device=asked.device)
        lp = torch.zeros(b, n, k, dtype=found.logps.dtype, device=asked.device)
        ent = torch.zeros(b, n, dtype=found.entropy.dtype, device=asked.device)
        tok[asked], lp[asked], ent[asked] = found.tokens[0], found.logps[0], found.entropy[0]
        return asked, Dists(tok, lp, ent)

    def static_shapes(self, budget: int) -> tuple[tuple[int, ...], int]:
        """Pass 1's block, then refinements over at most 2 x budget entries (nodes + MASK queries)."""
        block, scratch = super().static_shapes(budget)
        if not self.refine_passes:
            return block, scratch
        check_compiled_budget(self.name, budget, self.max_compiled_budget({"refine_passes": self.refine_passes}))
        refine = buckets_up_to(2 * budget)
        return tuple(sorted({*block, *refine})), max(scratch, refine[-1])

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        if not self.refine_passes:
            return super().propose(seqs, budget)  # pass 1 only: DFlash-T's pipeline on a causal head
        cache = self.require_cache(seqs)
        roots = self.roots(seqs, cache)
        marginals = self.marginals(roots, cache)
        with span("tree"):
            trees = build_trees(roots, budget, self.tree, marginals=marginals)
        known: KnownNodes | None = None
        for _ in range(self.refine_passes):
            answers = self.conditionals(trees, cache)
            with span("tree"):
                known = merge_known(known, trees, *answers)
                trees = build_trees(roots, budget, self.tree, marginals=marginals, known=known)
        with span("tree"):
            return trees.to_trees()

    def replay_tree(self) -> TreeOptions | None:
        """Pass 1 alone (r = 0) replays as DFlash-T does; a refinement pass's children depend on the branch."""
        return None if self.refine_passes else super().replay_tree()

    @classmethod
    def nominal_counters(cls, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
        """1 + r forwards: pass 1 over the block, then r refinements over at most 2B entries (B nodes
        and at most B MASK queries), an upper bound."""
        if block_size is None:
            return None
        r = int(options.get("refine_passes", cls.default_refine_passes))
        return 1.0 + r, float(block_size + r * 2 * budget)

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        return {**super().option_defaults(), "refine_passes": cls.default_refine_passes}

    @classmethod
    def max_compiled_budget(cls, options: Mapping[str, Any]) -> int | None:
        """A refinement forward runs up to 2 x budget entries (nodes + MASK queries): half the largest bucket."""
        return TREE_BUCKETS[-1] // 2 if int(options.get("refine_passes", cls.default_refine_passes)) else None


class JetFlowRefineDrafter(JetFlowDrafter):
    """This suite's extension: one tree-causal refinement pass, lazy global best-first trees.

    Its heads are jetflow heads (``trained_as``: one checkpoint format serves both arms) whose
    recipe defaults to the packed layout (its family's ``train_defaults``): a recipe option rather
    than a family of its own, so an
    explicitly packed jetflow head is the same cached head, and ``--layout`` stays an ablation axis
    of both arms.
    """

    name = "jetflow-refine"
    trained_as = "jetflow"
    default_refine_passes = 1
    tree_defaults = {"construction": "best-first"}
