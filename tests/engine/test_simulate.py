"""`engine.simulate`: greedy speculative decoding from the known output gives the engine's step counts.

The bugs it catches: features fed to the drafter for the wrong positions (off by the root, or the
bonus included), the bonus not counted, the last step not cut at the output's end, a row that
finished still observed. Any of them changes some request's step count against the engine's.
"""

from __future__ import annotations

import pytest

from drafters import DRAFTERS
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.simulate import simulated_steps
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner

QUESTIONS = [
    "Question: Tom has 3 boxes with 12 apples each. He gives away 7 apples. How many apples are left?\nAnswer:",
    "Question: A train travels 60 miles per hour for 3 hours. How far does it go?\nAnswer:",
    "Question: What is 15 plus 27?\nAnswer:",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dflash", "jetflow", "eagle", "ngram"])
@pytest.mark.parametrize("budget", [8, 48])
def test_simulated_steps_equal_the_engines(micro_target, learned_heads, name, budget):  # noqa: F811
    target = TargetRunner.load(micro_target, device="cpu")
    prompts = [target.tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    plugin = DRAFTERS.get(name)
    drafter = plugin.build(target, learned_heads[name]) if name in learned_heads else plugin.build(target)
    result = generate(target, prompts, StopRule(40, frozenset(target.eos_token_ids)), budget=budget, drafter=drafter)
    outputs = [r.output_tokens for r in result.requests]
    steps = [r.steps for r in result.requests]
    if name != "ngram":  # prompt lookup finds little to copy in these prompts; the heads must be tested accepting
        assert sum(steps) < sum(len(o) - 1 for o in outputs), "drafts must be accepted, or the test proves nothing"
    assert simulated_steps(target, drafter, prompts, outputs, budget) == steps
