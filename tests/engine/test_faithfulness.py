"""Rank-1 faithfulness: the top-ranked branch, its gap to the target's greedy choices, the share.

Bugs these catch: the branch following node order instead of draft scores, a token scored by its
own logits instead of its parent's, a gap that is not 0 on the target's own continuation, the
threshold applied the wrong way, AR or vLLM rows (no branch) counted as unfaithful.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from drafters import DRAFTERS
from drafters.oracle.drafter import OracleDrafter
from jetflow_bench.engine.faithfulness import branch_gaps, top_branch
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.measure.metrics import FAITHFUL_NATS, acceptance_stats
from tests.helpers.random_models import repetitive_prompts

A, B, C, X = 1, 2, 3, 4


def test_docstring_example():
    tree = DraftTree([0, A, B, C], [-1, 0, 0, 1], [0.0, -0.2, -1.0, -0.7])
    assert top_branch(tree) == [0, 1, 3]
    logits = torch.full((1, 4, 5), -10.0)
    logits[0, 0, A], logits[0, 0, B] = 2.0, 3.0  # at the root the target prefers b by 1 nat
    logits[0, 1, C], logits[0, 1, X] = 1.0, 1.0  # at a, c ties with the best
    logits[0, 3, :] = 50.0  # c's own logits must not enter: they score c's children
    assert branch_gaps([tree], logits) == ([2], [pytest.approx(1.0)])


def test_branch_follows_scores_not_node_order():
    tree = DraftTree([0, A, B, C, X], [-1, 0, 0, 2, 2], [0.0, -2.0, -0.1, -0.9, -0.3])
    assert top_branch(tree) == [0, 2, 4]  # b beats a, then x beats c
    tied = DraftTree([0, A, B], [-1, 0, 0], [0.0, -0.5, -0.5])
    assert top_branch(tied) == [0, 1]  # ties: the earlier node
    assert top_branch(DraftTree.root_only(7)) == [0]


def test_share_within_five_nats():
    steps = pd.DataFrame({
        "cell": ["x"] * 4 + ["ar"], "budget": [8] * 4 + [1], "drafted": [3, 3, 3, 3, 0],
        "accepted": [1, 0, 3, 2, 0], "emitted": [2, 1, 4, 3, 1],
        "rank1_len": [3, 3, 3, 0, 0], "rank1_gap": [0.0, FAITHFUL_NATS, FAITHFUL_NATS + 0.01, math.nan, 0.0],
    })
    out = acceptance_stats(steps, ["cell"]).set_index("cell")
    assert out.loc["x", "rank1_faithful"] == pytest.approx(2 / 3)  # a step without a branch is not counted
    assert math.isnan(out.loc["ar", "rank1_faithful"])
    old = acceptance_stats(steps.drop(columns=["rank1_len", "rank1_gap"]), ["cell"])  # runs before the counters
    assert old["rank1_faithful"].isna().all()


def test_engine_records_the_gap_from_verify_logits(runner):  # noqa: F811
    prompts = repetitive_prompts(4, seed=3)
    stop = StopRule(max_new_tokens=30)
    base = generate(runner, prompts, stop).requests
    assert all(s.rank1_len == 0 for s in generate(runner, prompts, stop).steps)  # AR: no branch
    oracle = OracleDrafter({tuple(p): r.output_tokens for p, r in zip(prompts, base, strict=True)})
    steps = generate(runner, prompts, stop, budget=6, drafter=oracle).steps
    assert all(s.rank1_len == s.drafted and abs(s.rank1_gap) < 1e-4 for s in steps)  # the target's own path
    steps = generate(runner, prompts, stop, budget=16, drafter=DRAFTERS.get("ngram")()).steps
    ranked = [s for s in steps if s.rank1_len > 0]
    assert ranked and all(s.rank1_gap >= 0 for s in ranked)
    assert any(s.rank1_gap > 0.1 for s in ranked), "prompt lookup should propose some tokens the target would not"
    # a branch with no gap is the target's greedy continuation: verification accepts all of it
    assert all(s.accepted_raw >= s.rank1_len for s in ranked if s.rank1_gap < 1e-6)
