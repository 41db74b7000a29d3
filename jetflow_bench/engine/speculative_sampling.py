"""Lossless speculative sampling over draft trees: the rule, why it is right, and a reference walk.

The rule at one tree node (recursive rejection sampling). Let p be the target's distribution
after the node (temperature, top-k, top-p applied) and c_1..c_k the node's children in order,
child c_i having been proposed from the distribution q_i (given everything before it):

    r_1 = p
    for i = 1..k:  accept c_i with probability min(1, r_i(c_i) / q_i(c_i))  -> descend into c_i
                   else r_{i+1} = norm(max(r_i - q_i, 0))                    (the residual)
    every child rejected: the bonus token is drawn from r_{k+1}

Why the output is a sample of p: one round emits y with probability
    q(y) min(1, r(y)/q(y)) + P(reject) (r - q)+(y) / sum (r - q)+
  = min(q, r)(y) + (r - q)+(y) = r(y),   because P(reject) = 1 - sum min(q, r) = sum (r - q)+,
so by induction over the children the node emits a sample of p. This needs q_i to be the law by
which c_i was really chosen — the one thing that depends on the drafter:

- Children sampled i.i.d. from the draft distribution q (SpecInfer): q_i = q, the ratio uses
  the draft probabilities and the residual is norm(max(r - q, 0)).
- Children listed deterministically — the top-K of the draft distribution (every learned drafter
  here) or n-gram continuations (a chain is the K = 1 case): given the context, c_i is not random,
  its law is the point mass on c_i. Then min(1, r_i(c_i) / 1) = r_i(c_i), and max(r_i - point
  mass, 0) zeroes c_i (r_i(c_i) <= 1): the residual is r_i with c_i removed and renormalised.
  The draft probabilities do not enter. Using them in the ratio is wrong: a child with
  q(c) < p(c) would be accepted every time, emitting c with probability 1 instead of p(c).
  Keeping r_i = p (no residual update) is wrong too: a rejected child can come back as the bonus.
  The tests show both failing the distribution test that the rule passes.

For point masses the rule has a closed form. By the chain rule, the walk accepts c_i with
probability r_i(c_i) * prod_{j<i} (1 - r_j(c_j)) = p(c_i), and emits a bonus y (not a child) with
probability p(y). So it is exactly: draw y ~ p; if a child holds y, descend into it, else y is
the bonus. Below the accepted child the walk repeats with the target's distribution there; the
drafter chose that child's children without seeing the target's random numbers, so every token
is, given the tokens before it, a sample of the target: the output has the law of plain sampling.

`sample_accept` (the engine's rule) is that closed form, batched: one draw per tree node
(`sampling.draw`, the inverse CDF with the request's uniform for the node's output position),
then the greedy tree rule with the drawn token in place of the argmax (`acceptance.accept_tree`).
Nodes at one depth share a uniform; that is sound because the walk visits one node per depth,
and the uniform is independent of which node that is. At temperature 0 the draw is the argmax
and this is the greedy rule, token for token. `walk_tree` is the literal walk above, kept as the
reference the tests compare `sample_accept` with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from jetflow_bench.engine.acceptance import Acceptance, accept_tree
from jetflow_bench.engine.sampling import SamplingParams, draw, inverse_cdf
from jetflow_bench.engine.tree import DraftTree


def sample_accept(
    tokens: torch.Tensor,  # (B, N) node tokens
    parents: torch.Tensor,  # (B, N) parent index, -1 for root/padding
    depths: torch.Tensor,  # (B, N)
    valid: torch.Tensor,  # (B, N) bool
    ancestors: torch.Tensor,  # (B, N, N) bool, [b, i, j] = j is i or an ancestor of i
    target_logits: torch.Tensor,  # (B, N, V) the target's logits after each node
    uniforms: torch.Tensor,  # (B, N) U[request, output position of the token after the node]
    params: SamplingParams,
) -> Acceptance:
    """Accept a path of each tree and its bonus token so the output is a sample of the target."""
    target_tokens = draw(target_logits, uniforms, params)  # (B, N) the target's token after each node
    return accept_tree(tokens, parents, depths, valid, ancestors, target_tokens)


def verify_node(
    target_probs: torch.Tensor,  # (V,) p at the node
    children: Sequence[int],  # c_1..c_k, in the order they are tried
    proposals: Sequence[torch.Tensor],  # k x (V,) q_i, the law c_i was proposed from
    coins: Sequence[float],  # k uniforms in [0, 1), one per child tried
    bonus_u: float,  # uniform for the bonus draw
) -> tuple[int | None, int | None]:
    """One node of the recursive rejection rule (module docstring), literally.

    Returns (index of the accepted child, None) or (None, bonus token drawn from the residual).
    """
    residual = target_probs.double() / target_probs.double().sum()  # (V,)
    for i, (child, q) in enumerate(zip(children, proposals, strict=True)):
        q = q.double()  # (V,)
        if coins[i] < min(1.0, float(residual[child] / q[child])):
            return i, None
        left = (residual - q).clamp(min=0)  # (V,)
        if float(left.sum()) <= 0:  # r == q: rejection had probability 0
            continue
        residual = left / left.sum()
    return None, int(inverse_cdf(residual, torch.tensor(bonus_u, dtype=torch.float64)))


def point_mass(token: int, vocab: int) -> torch.Tensor:
    """(V,) the law of a child that was listed, not sampled."""
    return torch.nn.functional.one_hot(torch.tensor(token), vocab).double()


def walk_tree(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
    """The reference walk over one deterministic tree: (accepted node path root..last, bonus token).

    ``target_probs`` (N, V): p after each node. Children are tried in node order with point-mass
    proposals and fresh uniforms from ``generator``.
    """
    vocab = target_probs.shape[-1]
    kids: list[list[int]] = [[] for _ in range(len(tree))]
    for node in range(1, len(tree)):
        kids[tree.parents[node]].append(node)
    path = [0]
    while True:
        node = path[-1]
        children = [tree.tokens[k] for k in kids[node]]
        coins = torch.rand(len(children) + 1, generator=generator, dtype=torch.float64).tolist()
        chosen, bonus = verify_node(target_probs[node], children, [point_mass(c, vocab) for c in children],
                                    coins[:-1], coins[-1])
        if chosen is None:
            return path, int(bonus)
        path.append(kids[node][chosen])
