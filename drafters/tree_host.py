"""Draft trees built on the host by the reference builder, handed back as a `TreeBatch`.

Why a second path: on a CPU the batched tensor builder (`drafters.tree_ops`) costs 200-400 small
ops of a few microseconds each, several times what the reference heap spends on the same tree
(``jfbench bench drafter --drafter jetflow[builder=tensor]=DIR --drafter jetflow=DIR`` shows
both). On a CPU the distributions already live in host memory, so the reference builder
(`drafters.tree_builder.build_tree`) is the fast path there; on an accelerator the tensor builder
keeps the tree on the device. Both give the same trees (tested), so ``builder=auto`` picks by device.

One transfer in (the top-K distributions and known tries as lists), one tree per row, one packed
`TreeBatch` out; the rows' `DraftTree`s are kept so `TreeBatch.to_trees` costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from drafters.tree_builder import (
    ChildDist,
    TokenPath,
    TreeOptions,
    build_tree,
    conditional_lookup,
    marginal_lookup,
    tree_paths,
)
from drafters.tree_tensors import Dists, KnownNodes, TreeBatch
from jetflow_bench.engine.tree import DraftTree


def host_dists(tokens: torch.Tensor, logps: torch.Tensor, entropy: torch.Tensor) -> list[list[ChildDist]]:
    """(R, S, K) tokens / log-probs and (R, S) entropies -> per row, per slot `ChildDist`s."""
    return [
        [ChildDist(tuple(t), tuple(lp), h) for t, lp, h in zip(tok_row, lp_row, ent_row, strict=True)]
        for tok_row, lp_row, ent_row in zip(tokens.tolist(), logps.tolist(), entropy.tolist(), strict=True)
    ]


def trie_index(parents: list[int], tokens: list[int]) -> dict[TokenPath, int]:
    """Path below the root -> trie node of one row (node 0 = the root; later parentless = padding)."""
    paths: list[TokenPath | None] = [()]
    index: dict[TokenPath, int] = {(): 0}
    for t in range(1, len(parents)):
        above = paths[parents[t]] if parents[t] >= 0 else None
        paths.append(None if above is None else (*above, tokens[t]))
        if above is not None:
            index.setdefault(paths[t], t)  # type: ignore[arg-type]
    return index


def host_trees(
    roots: torch.Tensor, budget: int, options: TreeOptions, marginals: Dists | None, known: KnownNodes | None
) -> tuple[list[DraftTree], list[list[int]]]:
    """One tree per row by the reference builder, and each node's trie index in ``known`` (-1: none)."""
    marg = host_dists(marginals.tokens, marginals.logps, marginals.entropy) if marginals is not None else None
    if known is not None:
        k_parent, k_token, k_has = known.parent.tolist(), known.token.tolist(), known.has_dist.tolist()
        k_dists = host_dists(known.dists.tokens, known.dists.logps, known.dists.entropy)
    trees: list[DraftTree] = []
    ids: list[list[int]] = []
    for b, root in enumerate(roots.tolist()):
        fallback: Callable[[TokenPath], ChildDist | None] = (
            marginal_lookup(marg[b]) if marg is not None else (lambda path: None)
        )
        children, index = fallback, {}
        if known is not None:
            index = trie_index(k_parent[b], k_token[b])
            own = {path: k_dists[b][t] for path, t in index.items() if k_has[b][t]}
            children = conditional_lookup(own, fallback) if marg is not None else own.get
        tree = build_tree(root, children, budget, options)
        trees.append(tree)
        ids.append([index.get(path, -1) for path in tree_paths(tree)] if known is not None else [-1] * len(tree))
    return trees, ids


def build_trees_on_host(
    roots: torch.Tensor, budget: int, options: TreeOptions, marginals: Dists | None, known: KnownNodes | None
) -> TreeBatch:
    """`tree_ops.build_trees` computed by the reference builder (`host_trees`), packed as a `TreeBatch`."""
    trees, ids = host_trees(roots, budget, options, marginals, known)
    width = max(len(t) for t in trees)

    def padded(rows: list[list], fill, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([row + [fill] * (width - len(row)) for row in rows], dtype=dtype, device=roots.device)

    return TreeBatch(
        tokens=padded([t.tokens for t in trees], 0, torch.long),
        parents=padded([t.parents for t in trees], -1, torch.long),
        depths=padded([t.depths for t in trees], 0, torch.long),
        scores=padded([t.scores for t in trees], 0.0, torch.float64),
        valid=padded([[True] * len(t) for t in trees], False, torch.bool),
        known_ids=padded(ids, -1, torch.long),
        host_trees=trees,
    )
