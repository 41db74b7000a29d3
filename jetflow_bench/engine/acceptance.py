"""Tree acceptance given the target's token at every node (vectorised over a padded batch of trees).

Rule: a drafted node is correct when its token equals the target's token at its parent; a node
is accepted when it and all its ancestors are correct. The deepest accepted node wins (lowest
index on ties), and the target's token at that node is the bonus token, so every verify step
emits accepted + 1 tokens.

"The target's token" at a node is its argmax when greedy — the output then equals plain greedy
decoding token for token — and its sampled token at temperature > 0, which makes this the
lossless rejection rule for deterministic draft trees (derivation in `speculative_sampling`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Acceptance:
    best: list[int]  # (B,) node index of the deepest accepted node per row
    accepted: list[int]  # (B,) accepted drafted tokens per row (= depth of best)
    bonus: list[int | None]  # (B,) the target's token at the best node (None: unknown, `engine.simulate` at the output's end)
    paths: list[list[int]]  # per row: node indices root .. best


def accept_tree(
    tokens: torch.Tensor,  # (B, N) node tokens
    parents: torch.Tensor,  # (B, N) parent index, -1 for root/padding
    depths: torch.Tensor,  # (B, N)
    valid: torch.Tensor,  # (B, N) bool
    ancestors: torch.Tensor,  # (B, N, N) bool, [b, i, j] = j is i or an ancestor of i
    target_tokens: torch.Tensor,  # (B, N) the target's token after each node (argmax, or its sample)
) -> Acceptance:
    parent_choice = target_tokens.gather(1, parents.clamp(min=0))  # (B, N) target's pick at the parent
    correct = (tokens == parent_choice) & valid
    correct[:, 0] = True  # the root is committed already
    # A node is accepted iff no node on its root path is incorrect.
    accepted_mask = ~(ancestors & ~correct[:, None, :]).any(-1) & valid  # (B, N)
    score = torch.where(accepted_mask, depths, torch.full_like(depths, -1))
    best = score.argmax(1)  # (B,) first maximum = lowest index on ties
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    bonus = target_tokens[rows, best]
    path_mask = ancestors[rows, best]  # (B, N) nodes on the root..best path
    # Parents precede children, so the path is its nodes in index order: sort them to the front.
    n = tokens.shape[1]
    on_path = torch.where(path_mask, torch.arange(n, device=tokens.device), n).sort(dim=1).values  # (B, N)
    accepted = depths[rows, best]
    packed = torch.cat([best[:, None], bonus[:, None], accepted[:, None], on_path], dim=1).tolist()  # one transfer
    paths = [row[3 : 4 + row[2]] for row in packed]
    return Acceptance([r[0] for r in packed], [r[2] for r in packed], [r[1] for r in packed], paths)
