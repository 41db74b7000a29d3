"""Rank-1 faithfulness: how far the drafter's favourite branch is from what the target would write.

The paper's figure (the authors' project page): the share of steps whose top-ranked draft branch
lies within 5 nats of the target's preferred continuation. Per verify step the engine records two
raw counters from the tree and the verify logits it already has; `jetflow_bench.measure.metrics` applies
the threshold.

- The top-ranked branch: from the root, step to the child with the highest draft score
  (`DraftTree.scores`; ties: the earlier node) until a leaf. Its drafted length is ``rank1_len``.
- ``rank1_gap`` (nats) = sum over the branch's tokens y_i of
  max_v log p_target(v | branch_<i) − log p_target(y_i | branch_<i),
  read from the verify logits at each token's parent, which the tree mask conditions on exactly
  that branch. It is 0 when the branch is the target's greedy continuation of the same length,
  and it is what the branch's log-prob falls short of greedy choices made along the same prefix.
  The log-softmax normaliser cancels, so raw logits suffice.

Worked example: root -> a (score -0.2) / b (-1.0); a -> c (-0.5). Branch = [root, a, c];
with target logits at root {a: 2, b: 3} and at a {c: 1, x: 1}: gap = (3 - 2) + (1 - 1) = 1 nat.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from jetflow_bench.engine.tree import DraftTree


def top_branch(tree: DraftTree) -> list[int]:
    """Node indices of the top-ranked branch, root first (module docstring)."""
    best: dict[int, int] = {}  # parent -> its best child so far (the earlier node on ties)
    for node in range(1, len(tree)):
        parent = tree.parents[node]
        if parent not in best or tree.scores[node] > tree.scores[best[parent]]:
            best[parent] = node
    branch = [0]
    while branch[-1] in best:
        branch.append(best[branch[-1]])
    return branch


def branch_gaps(trees: Sequence[DraftTree], logits: torch.Tensor) -> tuple[list[int], list[float]]:
    """(rank1_len, rank1_gap) per tree; ``logits`` (B, N, V) are the verify logits, node i of tree b
    at [b, i]. One host transfer for the whole batch."""
    branches = [top_branch(t) for t in trees]
    length = max(len(b) for b in branches) - 1
    if length == 0:
        return [0] * len(trees), [0.0] * len(trees)
    parents = torch.zeros(len(trees), length, dtype=torch.long)  # (B, L) node whose logits score token i
    tokens = torch.zeros(len(trees), length, dtype=torch.long)  # (B, L)
    live = torch.zeros(len(trees), length, dtype=torch.bool)  # (B, L)
    for row, (tree, branch) in enumerate(zip(trees, branches, strict=True)):
        n = len(branch) - 1
        parents[row, :n] = torch.tensor(branch[:-1])
        tokens[row, :n] = torch.tensor([tree.tokens[u] for u in branch[1:]])
        live[row, :n] = True
    device = logits.device
    rows = torch.arange(len(trees), device=device)[:, None]
    at = logits[rows, parents.to(device)].float()  # (B, L, V)
    gap = at.max(-1).values - at.gather(-1, tokens.to(device)[..., None])[..., 0]  # (B, L) nats
    total = torch.where(live.to(device), gap, 0.0).sum(-1)  # (B,)
    return [len(b) - 1 for b in branches], total.tolist()
