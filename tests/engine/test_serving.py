"""Continuous batching (`jetflow_bench.engine.serving`): requests join a running batch and leave it
as they finish, and every request's output stays the one it gets decoded alone, in every arm."""

from __future__ import annotations

import pytest
import torch

from drafters import DRAFTERS
from jetflow_bench.engine.kv_cache import KVCache
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.sampling import SamplingParams
from jetflow_bench.engine.serving import serve
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.plugins import trains

QUESTIONS = [
    "Question: Tom has 3 boxes with 12 apples each. He gives away 7 apples. How many apples are left?\nAnswer:",
    "Question: A train travels 60 miles per hour for 3 hours. How far does it go?\nAnswer:",
    "Question: Sara reads 5 pages a day. How many pages does she read in 2 weeks?\nAnswer:",
    "Question: A shop sells pens at 2 dollars each. Ann buys 4 pens and 3 pens. How much does she pay?\nAnswer:",
    "Question: There are 24 students and 6 tables. How many students sit at each table?\nAnswer:",
]


@pytest.fixture(scope="module")
def setup(micro_target):
    target = TargetRunner.load(micro_target, device="cpu")
    prompts = [target.tokenizer(q, add_special_tokens=False)["input_ids"] for q in QUESTIONS]
    # Different lengths make requests finish at different steps, so newcomers join mid-decode.
    stop = StopRule(24, frozenset(target.eos_token_ids))
    alone = [generate(target, [p], stop).requests[0].output_tokens for p in prompts]
    return target, prompts, stop, alone


def test_add_rows_appends_a_prefilled_cache_in_freed_storage():
    # Bug caught: rows landing at the wrong place, or the old rows' contents lost when storage grows.
    def cache(rows, capacity, fill):
        c = KVCache(1, rows, 1, 2, capacity, torch.float32, torch.device("cpu"))
        for r in range(rows):
            c.k[0][r] = fill + r
        c.lengths = [3 + r for r in range(rows)]
        return c

    live = cache(3, 8, 0.0)
    live.keep_rows([2, 0])  # storage for 3 rows, 2 live
    storage = live.k[0].untyped_storage().data_ptr()
    live.add_rows(cache(1, 6, 10.0))  # fits the freed row: no new storage
    assert live.k[0].untyped_storage().data_ptr() == storage
    assert live.lengths == [5, 3, 3]
    assert [live.k[0][r, 0, 0, 0].item() for r in range(3)] == [2.0, 0.0, 10.0]
    live.add_rows(cache(2, 8, 20.0))  # grows
    assert live.lengths == [5, 3, 3, 3, 4]
    assert [live.k[0][r, 0, 0, 0].item() for r in range(5)] == [2.0, 0.0, 10.0, 20.0, 21.0]
    assert live.v[0].shape[0] == 5


def drafter_for(target, name, heads):
    plugin = DRAFTERS.get(name)
    return plugin.build(target, heads[plugin.train_name()]) if trains(name) else plugin.build(target)


class StepTime:
    """A clock that ticks once per read (and jumps on sleep): arrivals then fall at fixed steps."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def step_time(monkeypatch):
    from jetflow_bench.engine import meter, serving

    fake = StepTime()
    monkeypatch.setattr(meter, "time", fake)
    monkeypatch.setattr(serving, "time", fake)
    return fake


@pytest.mark.parametrize("name", ["ngram", pytest.param("eagle", marks=pytest.mark.slow),
                                  pytest.param("jetflow", marks=pytest.mark.slow)])
def test_requests_joining_mid_decode_keep_their_greedy_output(setup, learned_heads, step_time, name):  # noqa: F811
    # Bug caught: a newcomer's KV rows, drafter context or first token mixed up with a running row's
    # (outputs then differ from the request decoded alone), or finished rows never freed.
    target, prompts, stop, alone = setup
    drafter = drafter_for(target, name, learned_heads if name != "ngram" else {})
    out = serve(target, prompts, stop, arrivals=[0, 0, 6, 9, 9], max_concurrency=3, budget=8, drafter=drafter)
    assert [r.output_tokens for r in out.batch.requests] == alone
    assert any(t.joined_running for t in out.timelines), "a request must join while others decode"
    assert max(s.active for s in out.batch.steps) <= 3
    assert sum(s.accepted for s in out.batch.steps) > 0, "drafts must be accepted, or the test proves nothing"


def test_open_loop_arrivals_queue_and_stamp_every_token(setup):
    target, prompts, stop, alone = setup
    out = serve(target, prompts, stop, arrivals=[0.0, 0.0, 0.01, 0.02, 0.02], max_concurrency=3)
    assert [r.output_tokens for r in out.batch.requests] == alone
    for timeline, request in zip(out.timelines, out.batch.requests, strict=True):
        assert sum(n for _, n in timeline.chunks) == len(request.output_tokens)  # one stamp per token
        times = [t for t, _ in timeline.chunks]
        assert times == sorted(times) and timeline.sent_s <= timeline.admitted_s <= times[0]
    assert [round(t.sent_s, 6) for t in out.timelines] == [0, 0, 0.01, 0.02, 0.02]  # open loop: sent on arrival


def test_sampled_requests_keep_their_own_random_streams(setup, step_time):
    # Bug caught: a newcomer drawing with its batch row's stream instead of its request's.
    target, prompts, stop, _ = setup
    sampled = SamplingParams(temperature=1.0, seed=3)
    ids = [40, 41, 42, 43, 44]
    out = serve(target, prompts, stop, arrivals=[0, 4, 8, 8, 12], sampling=sampled, request_ids=ids,
                budget=4, drafter=DRAFTERS.get("ngram").build(target))
    assert sum(t.joined_running for t in out.timelines) >= 2
    for i, request in enumerate(out.batch.requests):
        alone = generate(target, [prompts[i]], stop, sampling=sampled, request_ids=[ids[i]]).requests[0]
        assert request.output_tokens == alone.output_tokens
    assert len({tuple(r.output_tokens) for r in out.batch.requests}) == len(prompts)
