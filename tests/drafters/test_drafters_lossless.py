"""Every learned drafter is lossless: engine output == plain greedy output, token for token.

Briefly trained heads on the micro toy target, budgets 16 and 64, batch 1 and 2.
"""

from __future__ import annotations

import pytest

from drafters import DRAFTERS
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner

QUESTIONS = [
    "Question: Tom has 3 boxes with 12 apples each. He gives away 7 apples. How many apples are left?\nAnswer:",
    "Question: A train travels 60 miles per hour for 3 hours. How far does it go?\nAnswer:",
]
VARIANTS = [
    ("eagle", {}),
    ("eagle", {"depth": 4, "construction": "accum"}),
    ("dflash", {}),
    ("jetflow", {}),  # as released: r = 0, accum
    ("jetflow-refine", {}),  # the extension on the same head: r = 1, best-first
    ("jetflow", {"refine_passes": 2, "construction": "spine-first", "scoring": "entropy"}),
    ("dflash", {"fanout": 1}),  # linear DFlash
    ("eagle3", {}),  # the EAGLE-3 reference drafting config on the eagle head
    ("eagle", {"depth": 4, "construction": "best-first"}),  # a frontier as wide as the budget
    ("dflash", {"construction": "frontier"}),
]


@pytest.fixture(scope="module")
def setup(micro_target):
    target = TargetRunner.load(micro_target, device="cpu")
    prompts = [target.tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    stop = StopRule(40, frozenset(target.eos_token_ids))
    return target, prompts, stop, generate(target, prompts, stop)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "options"), VARIANTS)
@pytest.mark.parametrize("budget", [16, 64])
def test_learned_drafters_are_lossless(setup, learned_heads, name, options, budget):  # noqa: F811
    target, prompts, stop, reference = setup
    plugin = DRAFTERS.get(name)
    drafter = plugin.build(target, learned_heads[plugin.train_name()], **options)
    for batch in (prompts, prompts[:1]):
        result = generate(target, batch, stop, budget=budget, drafter=drafter)
        expected = [r.output_tokens for r in reference.requests[: len(batch)]]
        assert [r.output_tokens for r in result.requests] == expected
        assert max(s.drafted for s in result.steps) <= budget - 1
    tau = 1 + sum(s.accepted for s in result.steps) / len(result.steps)
    assert tau > 1.0, "a trained head should get some drafts accepted"
