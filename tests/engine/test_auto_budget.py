"""`--budgets auto` in the engine: the per-step policy chooses a prefix of the drafted tree.

Bugs these catch: the engine verifying the full max-budget tree instead of the chosen prefix, step
rows not recording the chosen budget, node rows missing or mislabelling the accepted path, auto
accepted for drafters whose scores are not log-probs, and (slow) greedy outputs that change when
the budget moves from step to step — with the check that drafts were accepted at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest

from drafters import DRAFTERS
from jetflow_bench.core.budget_policy import BudgetPolicy
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from tests.helpers.random_models import random_model, repetitive_prompts


class ScoredOracle(Drafter):
    """The target's own continuation as a chain, each node scored log(0.8) deeper (a log-prob claim)."""

    name = "scored-oracle"
    node_scores = "logp"

    def __init__(self, references: Mapping[tuple[int, ...], Sequence[int]]) -> None:
        self.references = references
        self.budgets: list[int] = []

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        self.budgets.append(budget)
        trees = []
        for seq in seqs:
            done = len(seq.tokens) - seq.prompt_len
            chain = [seq.tokens[-1], *self.references[tuple(seq.tokens[: seq.prompt_len])][done : done + budget - 1]]
            trees.append(DraftTree(chain, list(range(-1, len(chain) - 1)), [d * math.log(0.8) for d in range(len(chain))]))
        return trees


@pytest.fixture(scope="module")
def setup():
    runner = TargetRunner(random_model("qwen3", seed=1), None, "random-qwen3")
    prompts = repetitive_prompts(3, seed=5)
    stop = StopRule(max_new_tokens=30)
    base = generate(runner, prompts, stop).requests
    return runner, prompts, stop, base, {tuple(p): r.output_tokens for p, r in zip(prompts, base, strict=True)}


def test_flat_verify_cost_buys_the_largest_candidate(setup):
    runner, prompts, stop, base, refs = setup
    drafter = ScoredOracle(refs)
    result = generate(runner, prompts, stop, drafter=drafter, policy=BudgetPolicy((1, 4, 8), lambda n, b: 1.0))
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in base]
    assert set(drafter.budgets) == {8}  # chose the largest, so it keeps drafting at the largest
    assert {s.budget for s in result.steps} == {8}
    assert sum(s.accepted for s in result.steps) > 0
    assert max(s.drafted for s in result.steps) <= 7


def test_costly_nodes_make_the_policy_verify_the_root_only(setup):
    runner, prompts, stop, base, refs = setup
    policy = BudgetPolicy((1, 4, 8), lambda n, b: n**3)  # a node costs far more than it can return
    result = generate(runner, prompts, stop, drafter=ScoredOracle(refs), policy=policy)
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in base]
    assert {s.budget for s in result.steps} == {1}
    assert all(s.drafted == 0 for s in result.steps)  # the prefix, not the drafted tree, was verified


def test_node_blocks_record_the_verified_prefix_and_its_accepted_path(setup):
    runner, prompts, stop, base, refs = setup
    result = generate(runner, prompts, stop, drafter=ScoredOracle(refs), policy=BudgetPolicy((1, 4), lambda n, b: 1.0))
    assert len(result.nodes) == len(result.steps)
    for block, step in zip(result.nodes, result.steps, strict=True):
        assert len(block.scores) == step.drafted + 1  # the verified tree, root included
        assert len(block.path) - 1 == step.accepted_raw  # the oracle's path: every verified node
    static = generate(runner, prompts, stop, budget=4, drafter=ScoredOracle(refs))
    assert len(static.nodes) == len(static.steps)  # static budgets record nodes too


def test_auto_refuses_drafters_without_log_prob_scores(setup):
    runner, prompts, stop, _, _ = setup
    with pytest.raises(JfbenchError, match="log-probs"):
        generate(runner, prompts, stop, drafter=DRAFTERS.get("ngram")(), policy=BudgetPolicy((1, 4), lambda n, b: 1.0))
    assert generate(runner, prompts, stop, budget=4, drafter=DRAFTERS.get("ngram")()).nodes == []


QUESTIONS = [
    "Question: Tom has 3 boxes with 12 apples each. He gives away 7 apples. How many apples are left?\nAnswer:",
    "Question: A train travels 60 miles per hour for 3 hours. How far does it go?\nAnswer:",
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "options"), [("jetflow", {}), ("dflash", {}), ("eagle", {})])
def test_auto_budget_is_lossless_with_learned_heads(micro_target, learned_heads, name, options):  # noqa: F811
    """Real heads: outputs equal AR at batch 2 and 1 when the budget changes every step (a scripted
    policy cycling 64, 4, 16, 1 through the real engine path: draft, cut, verify, observe) with
    drafts accepted, and under the real policy priced by this device's measured verify costs."""
    from jetflow_bench.sweep.auto_budget import cell_policy

    target = TargetRunner.load(micro_target, device="cpu")
    prompts = [target.tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    stop = StopRule(40, frozenset(target.eos_token_ids))
    reference = [r.output_tokens for r in generate(target, prompts, stop).requests]
    plugin = DRAFTERS.get(name)
    drafter = plugin.build(target, learned_heads[plugin.train_name()], **options)
    for batch in (prompts, prompts[:1]):
        cycling = CyclingPolicy((1, 4, 16, 64), lambda n, b: 1.0)
        measured = cell_policy(target, (1, 4, 16, 64), len(batch), context=len(batch[0]))
        for policy in (cycling, measured):
            result = generate(target, batch, stop, drafter=drafter, policy=policy)
            assert [r.output_tokens for r in result.requests] == reference[: len(batch)]
            assert {s.budget for s in result.steps} <= {1, 4, 16, 64}
            if policy is cycling:
                assert len({s.budget for s in result.steps}) > 1
                assert sum(s.accepted for s in result.steps) > 0, "a trained head should get some drafts accepted"


class CyclingPolicy(BudgetPolicy):
    """Drafts at the largest candidate and verifies 64, 4, 16, 1, 64, ... in turn."""

    def draft_budget(self) -> int:
        self.drafted_at = self.max_budget
        return self.drafted_at

    def choose(self, scores) -> int:
        self.last = (64, 4, 16, 1)[self.seen_steps % 4]
        return self.last


def test_auto_budgets_refuse_arms_whose_scores_are_not_log_probs_before_any_model_loads():
    """The drafter says what its options make of its node scores (`Drafter.scores_with`): an
    entropy-scored tree ranks nodes by something the per-step policy cannot read as a probability."""
    from jetflow_bench.sweep.arms import check_auto_budgets
    from jetflow_bench.sweep.grid import DrafterSpec

    check_auto_budgets([DrafterSpec("jetflow"), DrafterSpec("eagle", options=(("scoring", "logp"),))])
    for spec in (DrafterSpec("jetflow", options=(("scoring", "entropy"),)), DrafterSpec("ngram")):
        with pytest.raises(JfbenchError, match="does not score nodes by cumulative draft log-probs"):
            check_auto_budgets([spec])


def test_scores_with_reads_the_drafters_own_tree_defaults():
    """A learned drafter whose tree defaults to entropy scoring builds instances without log-prob
    scores: `scores_with` once read only the global TreeOptions default and said "logp"."""
    from drafters.block.jetflow import JetFlowDrafter

    class EntropyJetFlow(JetFlowDrafter):
        tree_defaults = {**JetFlowDrafter.tree_defaults, "scoring": "entropy"}

    assert EntropyJetFlow.scores_with({}) is None
    assert EntropyJetFlow.scores_with({"scoring": "logp"}) == "logp"
    assert JetFlowDrafter.scores_with({}) == "logp"
