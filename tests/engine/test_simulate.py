"""`engine.simulate`: greedy speculative decoding from the known output gives the engine's step counts.

The bugs it catches: features fed to the drafter for the wrong positions (off by the root, or the
bonus included), the bonus not counted, the last step not cut at the output's end, a row that
finished still observed. Any of them changes some request's step count against the engine's.
"""

from __future__ import annotations

import math

import pytest

from drafters import DRAFTERS
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.simulate import simulate
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
def test_simulated_step_counts_equal_the_engines(micro_target, learned_heads, name, budget):  # noqa: F811
    target = TargetRunner.load(micro_target, device="cpu")
    prompts = [target.tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    plugin = DRAFTERS.get(name)
    drafter = plugin.build(target, learned_heads[name]) if name in learned_heads else plugin.build(target)
    result = generate(target, prompts, StopRule(40, frozenset(target.eos_token_ids)), budget=budget, drafter=drafter)
    outputs = [r.output_tokens for r in result.requests]
    steps = [r.steps for r in result.requests]
    if name != "ngram":  # prompt lookup finds little to copy in these prompts; the heads must be tested accepting
        assert sum(steps) < sum(len(o) - 1 for o in outputs), "drafts must be accepted, or the test proves nothing"
    assert [r.steps for r in simulate(target, drafter, result.requests, budget).requests] == steps


SAME = ("request", "step", "batch_step", "active", "budget", "drafted", "accepted", "emitted", "depth", "draft_passes",
        "draft_entries", "draft_flops", "verify_flops")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["jetflow", "eagle"])
def test_simulated_records_are_the_engines_less_the_clock(micro_target, learned_heads, name):  # noqa: F811
    """A sweep's ``sim`` cells are built from these records: a counter recorded for another step or row
    (the bonus, a finished row, the batch's shrinking), a pass-1 marginal or rank block of another
    step, or a time where none was measured would change some table."""
    target = TargetRunner.load(micro_target, device="cpu")
    prompts = [target.tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    drafter = DRAFTERS.get(name).build(target, learned_heads[name])
    real = generate(target, prompts, StopRule(37, frozenset(target.eos_token_ids)), budget=24, drafter=drafter)
    sim = simulate(target, drafter, real.requests, 24)
    assert sum(r.accepted for r in real.steps) > 0
    assert [[getattr(r, f) for f in SAME] for r in sim.steps] == [[getattr(r, f) for f in SAME] for r in real.steps]
    assert all(r.timing == "none" and math.isnan(r.draft_s) and math.isnan(r.rank1_gap) for r in sim.steps)
    assert [r.output_tokens for r in sim.requests] == [r.output_tokens for r in real.requests]
    assert [r.finish_reason for r in sim.requests] == [r.finish_reason for r in real.requests]
    assert [(m.request, m.step, m.tokens) for m in sim.marginals] == [(m.request, m.step, m.tokens) for m in real.marginals]
    # A step the output's end cuts: the engine's path runs on through drafts it accepted past the end,
    # and it ranks those and the bonus there too, which the simulation cannot know; it keeps the path
    # and ranks of the tokens the step emitted (no made-up bonus).
    cut = {(r.request, r.step): r.emitted for r in real.steps if r.emitted <= r.accepted}
    assert [(n.request, n.step, n.path) for n in sim.nodes] == \
        [(n.request, n.step, n.path[: 1 + cut.get((n.request, n.step), len(n.path))]) for n in real.nodes]
    assert [(b.request, b.step, b.ranks) for b in sim.ranks] == \
        [(b.request, b.step, b.ranks[: cut.get((b.request, b.step), len(b.ranks))]) for b in real.ranks]
    assert name != "eagle" or cut, "a step cut at the output's end must be ranked, or the test proves nothing there"
    assert len(sim.nodes) > 0 and (len(sim.marginals) > 0) == (name == "jetflow") and (len(sim.ranks) > 0) == (name == "eagle")
