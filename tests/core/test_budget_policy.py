"""Calibrated acceptance (reliability curve, ECE) and the per-step budget policy, on synthetic data.

Bugs these catch: an ECE that is not ~0 for a drafter whose claimed probabilities are the true
acceptance rates (or ~0 for one that claims twice its rate); a policy that does not pick the
budget with the most tokens per second (compared with brute force on known curves); expected
tokens that forget the bonus token or count nodes past the budget; a tree prefix that differs
from what the builder makes at the smaller budget (which would make `--budgets auto` verify
trees no static budget would draft).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from drafters.tree_builder import (
    CONSTRUCTIONS,
    ChildDist,
    TreeOptions,
    build_tree,
    conditional_lookup,
    marginal_lookup,
)
from jetflow_bench.core.budget_policy import (
    EXPLORE_EVERY,
    BudgetPolicy,
    OnlineCalibration,
    best_budget,
    expected_tokens,
    label_nodes,
)
from jetflow_bench.core.calibration import (
    SCORE_EDGES,
    expected_calibration_error,
    reliability_table,
    score_bin,
)


def synthetic_nodes(rng: np.random.Generator, n: int, overconfidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Scores with claimed probability p; accepted with probability p / overconfidence."""
    claimed = rng.uniform(0.001, 1.0, n)
    accepted = rng.uniform(size=n) < claimed / overconfidence
    return np.log(claimed), accepted


def test_perfectly_calibrated_drafter_has_ece_near_zero():
    scores, accepted = synthetic_nodes(np.random.default_rng(0), 200_000, overconfidence=1.0)
    table = reliability_table(scores, accepted)
    assert expected_calibration_error(table) < 0.01
    assert np.allclose(table["predicted"], table["observed"], atol=0.03)


def test_overconfident_drafter_has_large_ece():
    scores, accepted = synthetic_nodes(np.random.default_rng(0), 200_000, overconfidence=2.0)
    ece = expected_calibration_error(reliability_table(scores, accepted))
    assert ece > 0.1  # observed = predicted / 2: mean |p - p/2| = E[p]/2 ~ 0.25


def test_errors_in_both_directions_do_not_cancel():
    """Under-confident on likely nodes, over-confident on unlikely ones, equally many of each: a
    signed error would average to ~0; ECE must not."""
    rng = np.random.default_rng(0)
    n = 100_000
    likely = rng.uniform(size=n) < 0.9  # claimed 0.6, observed 0.9
    unlikely = rng.uniform(size=n) < 0.05  # claimed 0.35, observed 0.05
    scores = np.concatenate([np.full(n, np.log(0.6)), np.full(n, np.log(0.35))])
    table = reliability_table(scores, np.concatenate([likely, unlikely]))
    assert expected_calibration_error(table) == pytest.approx(0.3, abs=0.01)


def test_score_bins_follow_the_edges():
    # bin b = [SCORE_EDGES[b + 1], SCORE_EDGES[b]]; a score on an edge belongs to the bin above it
    assert score_bin([0.0, -0.1, -0.25, -0.3, -100.0, 0.5]).tolist() == [0, 0, 0, 1, len(SCORE_EDGES) - 2, 0]


def test_expected_tokens_docstring_example_and_bonus():
    probs = [np.array([0.9, 0.5, 0.1])]
    assert expected_tokens(probs, [1, 2, 4]) == pytest.approx([1.0, 1.9, 2.5])
    assert expected_tokens(probs, [64]) == pytest.approx([2.5])  # a short tree stops counting
    assert expected_tokens([np.array([]), np.array([1.0])], [2]) == pytest.approx([3.0])  # 1 + (1 + 1)


def test_policy_picks_the_known_best_budget_on_synthetic_curves():
    """Acceptance decays geometrically with node rank; verify cost is flat then linear (a roofline).
    The policy's choice must equal the brute-force argmax of tokens / second."""
    budgets = (1, 4, 16, 64, 256)
    for knee, decay, slope in [(16, 0.9, 1e-3), (256, 0.99, 1e-4), (1, 0.5, 1e-2), (64, 0.97, 2e-4)]:
        probs = decay ** np.arange(1, 256)  # (255,) P(path accepted) of node rank 1..255
        scores = [[0.0, *np.log(probs).tolist()]]

        def cost(n: int, b: int, knee=knee, slope=slope) -> float:
            return 0.01 + slope * max(0, n - knee) * b

        tokens = [1 + probs[: b - 1].sum() for b in budgets]
        brute = budgets[int(np.argmax([t / cost(b, 1) for t, b in zip(tokens, budgets, strict=True)]))]
        policy = BudgetPolicy(budgets, cost, OnlineCalibration(prior_nodes=math.inf))  # trusts the scores
        assert policy.choose(scores) == brute


def test_best_budget_prefers_the_smaller_on_ties():
    assert best_budget([4, 1, 16], np.array([2.0, 1.0, 2.0]), np.array([2.0, 1.0, 2.0])) == 1


def test_online_calibration_corrects_an_overconfident_drafter():
    """A drafter claiming p = 0.9 for nodes accepted 30% of the time: after observing them, the
    calibrated probability moves to ~0.3 and the policy stops buying large trees."""
    calibration = OnlineCalibration()
    score = math.log(0.9)
    assert calibration.probability([score])[0] == pytest.approx(0.9)  # the prior: the drafter's claim
    rng = np.random.default_rng(1)
    calibration.update(np.full(1000, score), rng.uniform(size=1000) < 0.3)
    assert calibration.probability([score])[0] == pytest.approx(0.3, abs=0.05)


def test_label_nodes_docstring_example():
    assert label_nodes([9, 1, 2, 3], [-1, 0, 0, 1], [1]).tolist() == [1, 1, 0, -1]
    assert label_nodes([9, 1, 2, 3], [-1, 0, 0, 1], [2, 5]).tolist() == [1, 0, 1, 0]  # c is below rejected a


def test_policy_observe_learns_from_committed_tokens_and_draft_time():
    """Two drafted nodes share a bin, one is always right; a third (own bin) never is. The policy
    learns this even when the step verified the root only (the bonus token labels depth 1)."""
    policy = BudgetPolicy((1, 4), lambda n, b: 1.0)
    tree = SimpleNamespace(tokens=[0, 5, 6, 7], parents=[-1, 0, 0, 0],
                           scores=[0.0, math.log(0.9), math.log(0.9), math.log(0.02)])
    for _ in range(200):
        policy.observe([tree], [[5]], draft_s=0.5)  # the target's next token is 5
    p = policy.calibration.probability(tree.scores[1:])
    assert p[0] == pytest.approx(0.5, abs=0.05)  # nodes 1 and 2 share a bin: 1 of 2 accepted
    assert p[2] < 0.01  # its own bin, never accepted
    assert policy.draft_s == {4: pytest.approx(0.5)}  # drafted at the largest candidate


@pytest.mark.parametrize("construction", CONSTRUCTIONS)
def test_tree_prefix_equals_the_tree_built_at_the_smaller_budget(construction):
    """`--budgets auto` drafts at the largest candidate and cuts the prefix: for every construction
    and a budget-independent lookup (marginals, or conditionals + marginals), that prefix is the
    tree a fresh build at the smaller budget returns."""
    rng = np.random.default_rng(2)
    options = TreeOptions(construction=construction, fanout=3, max_depth=6)
    for trial in range(20):
        marginals = []
        for _ in range(6):
            logp = np.sort(np.log(rng.dirichlet(np.ones(5))))[::-1][:3]
            marginals.append(ChildDist(tuple(rng.permutation(50)[:3].tolist()), tuple(logp.tolist())))
        conditionals = {(marginals[0].tokens[0],): marginals[(trial + 1) % 6]}
        for lookup in (marginal_lookup(marginals), conditional_lookup(conditionals, marginal_lookup(marginals))):
            full = build_tree(0, lookup, 256, options)
            for budget in (1, 2, 4, 7, 16, 64):
                small = build_tree(0, lookup, budget, options)
                cut = full.prefix(budget)
                assert (cut.tokens, cut.parents, cut.scores) == (small.tokens, small.parents, small.scores)


def test_draft_budget_follows_the_last_choice_and_explores_at_the_largest():
    """Drafting at the largest candidate every step would pay its drafting cost while verifying
    small trees; the draft budget is the last choice, the largest candidate every 8th step."""
    policy = BudgetPolicy((1, 4, 16, 64), lambda n, b: 0.01 * n, draft_s=dict.fromkeys((1, 4, 16, 64), 0.0))
    assert policy.draft_budget() == 64
    tree = [[0.0, *(np.log(0.5) * np.arange(1, 64)).tolist()]]
    first = policy.choose(tree)
    assert first < 64
    drafted = []
    for _ in range(16):
        policy.seen_steps += 1
        drafted.append(policy.draft_budget())
    assert drafted.count(64) == 2 and drafted.count(first) == 14  # steps 8 and 16 explore
    policy.drafted_at = 4
    assert policy.choose([[0.0, -0.1, -0.2, -0.3, -0.4, -0.5]]) <= 4  # nothing above what was drafted


def test_exploration_escapes_a_dip_in_the_speed_up_curve():
    """This CPU's shape at batch 1: B = 4 loses to B = 1 and B = 16 beats both. A policy at B = 1
    that explored only one candidate above would see 4, stay at 1 and never find 16."""
    verify = {1: 1.0, 4: 2.3, 16: 2.6, 64: 5.0}  # seconds per step of a tree of n nodes
    policy = BudgetPolicy((1, 4, 16, 64), lambda n, b: verify[n], draft_s=dict.fromkeys((1, 4, 16, 64), 0.0))
    # path probabilities: 0.3 for the first 3 nodes, 0.08 for the next 12, ~0 after:
    # E[tokens | B] = 1, 1.9, 2.86, 2.86 -> tokens per second 1.0, 0.83, 1.10, 0.57
    probs = [0.3] * 3 + [0.08] * 12 + [1e-9] * 48
    tree = [[0.0, *np.log(probs).tolist()]]
    policy.last, policy.seen_steps = 1, EXPLORE_EVERY - 1  # at B = 1, an exploring step next
    assert policy.draft_budget() == 64
    assert policy.choose(tree) == 16
    policy.seen_steps += 1
    assert policy.draft_budget() == 16  # and it drafts there from now on


def test_drafting_cost_of_each_budget_is_counted_and_untried_ones_are_tried():
    """An EAGLE-like drafter: drafting at 16 or more costs 10x drafting at 4. With that measured, a
    flat verify cost no longer buys large trees; a draft budget not measured yet counts as free, so
    it gets tried. Node k is accepted w.p. 0.7^k: E[tokens | B] = 1, 2.53, 3.32, 3.33 (B = 1..64)."""
    probs = [[0.0, *(np.log(0.7) * np.arange(1, 64)).tolist()]]
    policy = BudgetPolicy((1, 4, 16, 64), lambda n, b: 1.0, draft_s={4: 0.1, 16: 1.0, 64: 10.0})
    assert policy.choose(probs) == 4  # 2.53 / 1.1 beats 1 / 1 (D(1) untried), 3.32 / 2 and 3.33 / 11
    untried = BudgetPolicy((1, 4, 16, 64), lambda n, b: 1.0, draft_s={64: 10.0})
    assert untried.choose(probs) == 16  # D(16) not measured yet: free
    untried.draft_s[16] = 10.0
    assert untried.choose(probs) == 4  # now D(4) is the untried one
    untried.draft_s[4] = 5.0
    assert untried.choose(probs) == 1  # 1 / 1 beats 2.53 / 6
