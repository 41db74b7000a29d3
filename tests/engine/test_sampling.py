"""The sampling distribution, the random streams and the acceptance rule, as pure functions."""

from __future__ import annotations

import math

import pytest
import torch

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.acceptance import accept_tree
from jetflow_bench.engine.sampling import (
    GREEDY,
    RandomStreams,
    SamplingParams,
    draw,
    inverse_cdf,
    target_probs,
)
from jetflow_bench.engine.speculative_sampling import point_mass, sample_accept, verify_node, walk_tree
from jetflow_bench.engine.tree import DraftTree, ancestor_mask, pad_trees
from tests.helpers.chi_square import ALPHA, chi_square_p

LOGITS = torch.log(torch.tensor([0.1, 0.4, 0.2, 0.3]))


def test_temperature_top_k_top_p_follow_their_definitions():
    probs = target_probs(LOGITS, SamplingParams(temperature=1.0))
    assert torch.allclose(probs, torch.tensor([0.1, 0.4, 0.2, 0.3]))
    hot = target_probs(LOGITS, SamplingParams(temperature=2.0))
    assert torch.allclose(hot, torch.tensor([0.1, 0.4, 0.2, 0.3]).sqrt() / torch.tensor([0.1, 0.4, 0.2, 0.3]).sqrt().sum())
    top2 = target_probs(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(top2, torch.tensor([0.0, 0.4, 0.0, 0.3]) / 0.7)
    # top-p 0.7: 0.4 then 0.3 reach 0.7 -> keep {1, 3}; top-p 0.71 needs the 0.2 too.
    assert torch.allclose(target_probs(LOGITS, SamplingParams(1.0, top_p=0.7)), torch.tensor([0, 0.4, 0, 0.3]) / 0.7)
    assert torch.allclose(target_probs(LOGITS, SamplingParams(1.0, top_p=0.71)), torch.tensor([0, 0.4, 0.2, 0.3]) / 0.9)
    assert torch.equal(target_probs(LOGITS, GREEDY), torch.tensor([0.0, 1.0, 0.0, 0.0]))


@pytest.mark.parametrize("bad", [{"temperature": -1.0}, {"temperature": math.inf}, {"top_p": 0.0}, {"top_p": 1.5},
                                 {"top_k": -1}])
def test_out_of_range_settings_are_user_errors(bad):
    with pytest.raises(JfbenchError):
        SamplingParams(**{"temperature": 1.0, **bad})


def test_inverse_cdf_worked_example_and_edges():
    probs = torch.tensor([0.2, 0.0, 0.5, 0.3])
    u = torch.tensor([0.0, 0.199, 0.2, 0.65, 0.71, 0.9999999999], dtype=torch.float64)
    assert inverse_cdf(probs.expand(6, 4), u).tolist() == [0, 0, 2, 2, 3, 3]  # token 1 (p = 0) never
    trailing_zero = torch.tensor([0.5, 0.5, 0.0])
    assert int(inverse_cdf(trailing_zero, torch.tensor(1 - 1e-17))) == 1  # u * total rounding up


def test_greedy_draw_is_the_inverse_cdf_of_the_point_mass():
    # Bug caught: the argmax shortcut disagreeing with the general path at temperature 0.
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 7, 11, generator=gen)  # (B, N, V)
    u = torch.rand(50, 7, generator=gen, dtype=torch.float64)
    assert torch.equal(draw(logits, u, GREEDY), inverse_cdf(target_probs(logits, GREEDY), u))


def test_streams_depend_on_seed_and_request_only():
    # Bug caught: a request's random numbers changing with the batch it is decoded in.
    alone = RandomStreams(7, [5], 12).u
    batched = RandomStreams(7, [3, 5, 9], 12).u
    assert torch.equal(batched[1], alone[0])
    assert not torch.equal(RandomStreams(8, [5], 12).u, alone)
    assert not torch.equal(batched[0], batched[1])
    rows, positions = torch.tensor([2, 0]), torch.tensor([[0, 1], [4, 4]])
    assert RandomStreams(7, [3, 5, 9], 12).at(rows, positions).tolist() == [
        [batched[2, 0].item(), batched[2, 1].item()], [batched[0, 4].item(), batched[0, 4].item()]]


# ---------------------------------------------------------------- one node: which residual rule is right
P = torch.tensor([0.05, 0.30, 0.10, 0.25, 0.15, 0.15])  # the target at a node
Q = torch.tensor([0.40, 0.05, 0.20, 0.05, 0.25, 0.05])  # a draft distribution that covers p badly
N_SAMPLES = 20_000


def emitted(children, proposals, n=N_SAMPLES, seed=0, rule=verify_node):
    """The token the node emits (the accepted child's, or the bonus), n times with fresh uniforms."""
    gen = torch.Generator().manual_seed(seed)
    coins = torch.rand(n, len(children) + 1, generator=gen, dtype=torch.float64).tolist()
    out = []
    for c in coins:
        chosen, bonus = rule(P, children, proposals, c[:-1], c[-1])
        out.append(children[chosen] if chosen is not None else bonus)
    return out


def law(probs):
    return dict(enumerate(probs.tolist()))


def top_k_list(k=3):
    return Q.topk(k).indices.tolist()  # [0, 4, 2]: deterministic children, as a learned drafter lists them


def no_residual_update(target, children, proposals, coins, bonus_u):
    """The wrong rule: accept c with probability p(c), never update p, bonus from p itself."""
    for i, child in enumerate(children):
        if coins[i] < float(target[child]):
            return i, None
    return None, int(inverse_cdf(target, torch.tensor(bonus_u, dtype=torch.float64)))


def test_point_mass_rule_preserves_the_target_for_a_top_k_list():
    children = top_k_list()
    samples = emitted(children, [point_mass(c, 6) for c in children])
    assert chi_square_p(samples, law(P)) > ALPHA
    assert sum(s in children for s in samples) > 0.2 * N_SAMPLES  # drafts are accepted, not just bonuses


def test_point_mass_rule_on_a_chain_accepts_with_probability_p():
    samples = emitted([3], [point_mass(3, 6)])
    assert chi_square_p(samples, law(P)) > ALPHA
    assert abs(sum(s == 3 for s in samples) / N_SAMPLES - 0.25) < 0.02


def test_draft_probabilities_rule_is_right_for_sampled_children():
    # SpecInfer: children drawn i.i.d. from q, ratio p/q, residual norm(max(r - q, 0)).
    gen = torch.Generator().manual_seed(1)
    samples = []
    for _ in range(N_SAMPLES // 4):
        children = torch.multinomial(Q, 3, replacement=True, generator=gen).tolist()
        samples += emitted(children, [Q] * 3, n=1, seed=int(torch.randint(2**31, (1,), generator=gen)))
    assert chi_square_p(samples, law(P)) > ALPHA


@pytest.mark.parametrize("wrong", ["draft-ratio", "no-residual-update"])
def test_power_wrong_rules_fail_for_a_top_k_list(wrong):
    # Power check: the same test must reject the two tempting mistakes the module docstring names.
    children = top_k_list()
    if wrong == "draft-ratio":
        samples = emitted(children, [Q] * len(children))  # q(c) in the ratio although c was listed
    else:
        samples = emitted(children, [point_mass(c, 6) for c in children], rule=no_residual_update)
    assert chi_square_p(samples, law(P)) < ALPHA


# ---------------------------------------------------------------- whole trees: batched rule vs reference walk
def random_tree(gen: torch.Generator, vocab: int, size: int) -> DraftTree:
    tokens, parents, used = [0], [-1], {0: set()}
    while len(tokens) < size:
        parent = int(torch.randint(len(tokens), (1,), generator=gen))
        free = [t for t in range(vocab) if t not in used[parent]]
        if not free:
            continue
        token = free[int(torch.randint(len(free), (1,), generator=gen))]
        used[parent].add(token)
        used[len(tokens)] = set()
        tokens.append(token)
        parents.append(parent)
    return DraftTree(tokens, parents)


def exact_walk_law(tree: DraftTree, probs: torch.Tensor) -> dict:
    """(accepted path, bonus) -> probability: the product of p along the path times p(bonus) at its end."""
    law_, kids = {}, {n: {tree.tokens[k] for k in range(1, len(tree)) if tree.parents[k] == n} for n in range(len(tree))}
    for node in range(len(tree)):
        path = tree.path_to(node)
        mass = math.prod(float(probs[a, tree.tokens[b]]) for a, b in zip(path, path[1:], strict=False))
        for y in range(probs.shape[-1]):
            if y not in kids[node] and probs[node, y] > 0:
                law_[(tuple(path), y)] = mass * float(probs[node, y])
    return law_


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_batched_rule_and_reference_walk_have_the_exact_law(top_p):
    # Bug caught: the closed form (draw per node, then the greedy rule) not being the walk it claims.
    gen = torch.Generator().manual_seed(3)
    vocab, tree = 5, random_tree(gen, 5, 9)
    params = SamplingParams(temperature=1.0, top_p=top_p)
    logits = 2 * torch.randn(len(tree), vocab, generator=gen)  # (N, V): p after each node
    probs = target_probs(logits, params)
    expected = exact_walk_law(tree, probs)
    walk = [(tuple(path), bonus) for path, bonus in (walk_tree(tree, probs, gen) for _ in range(N_SAMPLES))]
    assert chi_square_p(walk, expected) > ALPHA
    tokens, parents, depths, valid = pad_trees([tree] * N_SAMPLES)
    per_depth = torch.rand(N_SAMPLES, tree.depth + 1, generator=gen, dtype=torch.float64)  # U[r, t]
    u = per_depth.gather(1, depths)  # (B, N): nodes at one depth share their position's uniform
    acc = sample_accept(tokens, parents, depths, valid, ancestor_mask(parents, depths),
                        logits.expand(N_SAMPLES, -1, -1), u, params)
    batched = [(tuple(path), bonus) for path, bonus in zip(acc.paths, acc.bonus, strict=True)]
    assert any(len(p) > 2 for p, _ in batched)  # paths of depth >= 2 are accepted
    assert chi_square_p(batched, expected) > ALPHA


def test_greedy_rule_is_unchanged_at_temperature_zero():
    gen = torch.Generator().manual_seed(4)
    trees = [random_tree(gen, 6, 12) for _ in range(8)]
    tokens, parents, depths, valid = pad_trees(trees)
    anc = ancestor_mask(parents, depths)
    logits = torch.randn(8, 12, 6, generator=gen)
    u = torch.rand(8, 12, generator=gen, dtype=torch.float64)
    got = sample_accept(tokens, parents, depths, valid, anc, logits, u, GREEDY)
    assert got == accept_tree(tokens, parents, depths, valid, anc, logits.argmax(-1))


def test_trees_carry_the_draft_probability_of_each_child():
    # Bug caught: a drafter's tree losing q(child), which sampled-children rules would need.
    from drafters.tree_builder import ChildDist, TreeOptions, build_tree, marginal_lookup

    marginals = [ChildDist((1, 2), (math.log(0.6), math.log(0.3))), ChildDist((3, 4), (math.log(0.9), math.log(0.05)))]
    lazy = build_tree(0, marginal_lookup(marginals), 4, TreeOptions(construction="best-first", fanout=2))
    assert lazy.tokens == [0, 1, 3, 2]  # the module's worked example
    assert lazy.draft_logps == pytest.approx([0.0, math.log(0.6), math.log(0.9), math.log(0.3)])
    accum = build_tree(0, marginal_lookup(marginals), 4, TreeOptions(construction="accum", fanout=2))
    assert accum.tokens == [0, 1, 2, 3]  # the root's two children, then the best one's best child
    assert accum.draft_logps == pytest.approx([0.0, math.log(0.6), math.log(0.3), math.log(0.9)])
    assert DraftTree.chain([5, 6, 7]).draft_logps == [0.0, 0.0, 0.0]  # listed without a distribution
