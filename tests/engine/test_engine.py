"""The decode loop: losslessness, ragged batches, stop rules, raw step counters."""

import math

import pytest
import torch

from drafters import DRAFTERS
from drafters.oracle.drafter import OracleDrafter
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.tree import DraftTree
from tests.helpers.random_models import repetitive_prompts


@pytest.mark.parametrize("budget", [1, 3, 16, 64])  # 3: a CPU verifies its trees padded to 4 rows
@pytest.mark.parametrize("batch_size", [1, 4])
def test_ngram_is_lossless(runner, budget, batch_size):
    prompts = repetitive_prompts(8)
    stop = StopRule(max_new_tokens=40, eos_token_ids=frozenset({1}))
    reference = [r.output_tokens for r in generate(runner, prompts, stop).requests]
    drafter = DRAFTERS.get("ngram")()
    outputs, all_steps = [], []
    for start in range(0, len(prompts), batch_size):
        result = generate(runner, prompts[start : start + batch_size], stop, budget=budget, drafter=drafter)
        outputs += [r.output_tokens for r in result.requests]
        all_steps += result.steps
    assert outputs == reference
    if budget > 1:  # a drafter that rejects everything is trivially lossless: prove drafts were kept
        assert result.steps and max(s.drafted for s in result.steps) <= budget - 1
        assert sum(s.accepted for s in all_steps) > 0
        assert sum(s.emitted for s in all_steps) / len(all_steps) > 1.2  # τ on repetitive prompts


@pytest.mark.parametrize("budget", [2, 8, 64])
def test_oracle_reaches_the_budget_limited_maximum(runner, budget):
    prompts = repetitive_prompts(3, seed=5)
    stop = StopRule(max_new_tokens=30)
    base = generate(runner, prompts, stop).requests
    oracle = OracleDrafter({tuple(p): r.output_tokens for p, r in zip(prompts, base, strict=True)})
    result = generate(runner, prompts, stop, budget=budget, drafter=oracle)
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in base]
    for r in result.requests:  # 1 token from prefill, then `budget` tokens per verify step
        assert r.steps == math.ceil((len(r.output_tokens) - 1) / budget)
    assert all(s.accepted == s.drafted for s in result.steps)


def test_cpu_verifies_two_or_three_nodes_as_four_rows(runner):
    # Bugs caught: padding rows that change the real rows' logits (a padding node seen as an ancestor),
    # a cache too small for the padded rows, and padding where it does not pay (plain decoding, batches).
    assert [runner.tree_width(b) for b in (1, 2, 3, 4, 16)] == [1, 4, 4, 4, 16]
    assert runner.eager.rows(2, batch=2) == 2 and runner.eager.rows(1, batch=1) == 1
    prompt = [5, 6, 7, 8, 9]
    runner.prefill([prompt], capacity=len(prompt) + runner.tree_width(3))
    try:
        tree = DraftTree([9, 11, 12], [-1, 0, 1])
        padded, exact = runner.prepare([tree]), runner.prepare([tree], min_rows=1)
        assert padded.valid[0].tolist() == [True, True, True, False] and exact.tokens.shape[1] == 3
        torch.testing.assert_close(runner.forward(padded).logits[0, :3], runner.forward(exact).logits[0])
    finally:
        runner.release()


def test_counts_obey_the_stop_rule_on_the_final_step(runner):
    """The oracle knows 40 tokens but the stop rule keeps 30: every request's last step is cut
    inside an accepted path, and only the kept tokens may count as accepted."""
    prompts = repetitive_prompts(3, seed=7)
    long = generate(runner, prompts, StopRule(max_new_tokens=40)).requests
    oracle = OracleDrafter({tuple(p): r.output_tokens for p, r in zip(prompts, long, strict=True)})
    result = generate(runner, prompts, StopRule(max_new_tokens=30), budget=8, drafter=oracle)
    cut = 0
    for r in result.requests:
        rows = sorted((s for s in result.steps if s.request == r.request), key=lambda s: s.step)
        assert sum(s.emitted for s in rows) == len(r.output_tokens) - 1  # the 1st token is prefill's
        for s in rows[:-1]:
            assert s.emitted == s.accepted + 1 and s.accepted == s.accepted_raw
        final = rows[-1]
        assert final.emitted <= final.accepted_raw + 1 and final.accepted == min(final.accepted_raw, final.emitted)
        cut += final.accepted_raw - final.accepted
    assert cut > 0, "the fixture must truncate some final step inside its accepted path"


def test_verify_flops_follow_each_rows_tree_and_cache(runner):
    prompts = repetitive_prompts(2, seed=3)
    ngram = generate(runner, prompts, StopRule(max_new_tokens=12), budget=16, drafter=DRAFTERS.get("ngram")())
    assert any(s.drafted for s in ngram.steps)
    for s in ngram.steps:  # prompt lookup runs no model: no draft passes, entries or FLOPs
        assert s.draft_passes == s.draft_entries == 0 and s.draft_flops == 0
        assert s.verify_flops == runner.shape.forward_flops(s.drafted + 1, _cached(ngram, s, prompts) + s.drafted + 1)


def _cached(result, step, prompts) -> int:
    """Tokens in the target's cache when ``step`` ran: prompt + tokens emitted before it − the root."""
    before = [s for s in result.steps if s.request == step.request and s.step < step.step]
    return len(prompts[step.request]) + 1 + sum(s.emitted for s in before) - 1


def test_ar_baseline_records_one_token_per_step(runner):
    result = generate(runner, repetitive_prompts(2), StopRule(max_new_tokens=10))
    assert all(s.drafted == 0 and s.accepted == 0 and s.emitted == 1 for s in result.steps)
    assert [r.steps for r in result.requests] == [9, 9]
    assert {s.active for s in result.steps} == {2}


def test_budget_one_never_asks_the_drafter(runner):
    """The engine owns "budget 1 = verify the root alone": a drafter is not asked (bug: every drafter
    repeating the shortcut, or one forgetting it and drafting past the budget)."""

    class Refuses(OracleDrafter):
        def propose(self, seqs, budget):
            raise AssertionError(f"asked to draft at budget {budget}")

    prompts = repetitive_prompts(2, seed=3)
    stop = StopRule(max_new_tokens=8)
    result = generate(runner, prompts, stop, budget=1, drafter=Refuses({}))
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in generate(runner, prompts, stop).requests]
    assert all(s.drafted == 0 for s in result.steps)


def test_eos_and_ragged_finish(runner):
    prompts = repetitive_prompts(4, seed=2)
    free = generate(runner, prompts, StopRule(max_new_tokens=30)).requests
    # make the 5th generated token of request 0 an EOS: it must stop there, the others go on
    eos = free[0].output_tokens[4]
    stop = StopRule(max_new_tokens=30, eos_token_ids=frozenset({eos}))
    for drafter, budget in ((None, 1), (DRAFTERS.get("ngram")(), 16)):
        out = generate(runner, prompts, stop, budget=budget, drafter=drafter).requests
        first = free[0].output_tokens.index(eos)
        assert out[0].output_tokens == free[0].output_tokens[: first + 1]
        assert out[0].finish_reason == "eos"
        for r, f in zip(out, free, strict=True):
            end = f.output_tokens.index(eos) + 1 if eos in f.output_tokens else len(f.output_tokens)
            assert r.output_tokens == f.output_tokens[:end]


def test_stop_strings_cut_identically_in_every_arm(runner):
    prompts = repetitive_prompts(3, seed=9)
    free = generate(runner, prompts, StopRule(max_new_tokens=25)).requests
    stop_token = free[1].output_tokens[6]

    def decode(ids):
        return " ".join(f"w{i}" for i in ids)

    stop = StopRule(max_new_tokens=25, stop_strings=(f"w{stop_token} ",), decode=decode)
    ar = generate(runner, prompts, stop).requests
    spec = generate(runner, prompts, stop, budget=16, drafter=DRAFTERS.get("ngram")()).requests
    assert [r.output_tokens for r in ar] == [r.output_tokens for r in spec]
    assert ar[1].finish_reason in {"stop", "length"} and len(ar[1].output_tokens) <= 8


def test_budget_out_of_range_is_a_user_error(runner):
    stop = StopRule(max_new_tokens=5)
    for budget in (0, -3, 1025):
        with pytest.raises(JfbenchError, match="budget"):
            generate(runner, [[1, 2]], stop, budget=budget, drafter=DRAFTERS.get("ngram")())
    with pytest.raises(JfbenchError, match="needs a drafter"):
        generate(runner, [[1, 2]], stop, budget=4)


def test_stop_rule_is_independent_of_step_grouping():
    rule = StopRule(max_new_tokens=6, eos_token_ids=frozenset({9}))
    tokens = [4, 5, 9, 7, 7, 7, 7]
    assert rule.find_end(tokens, 0) == (3, "eos")
    assert rule.find_end(tokens[:2], 0) is None and rule.find_end(tokens, 2) == (3, "eos")
    assert rule.find_end([1] * 8, 0) == (6, "length")


def test_kv_cache_grows_in_place_keeping_committed_slots():
    import torch

    from jetflow_bench.engine.kv_cache import KVCache

    cache = KVCache(2, 2, 1, 4, capacity=3, dtype=torch.float32, device=torch.device("cpu"))
    k = torch.arange(2 * 1 * 3 * 4, dtype=torch.float32).view(2, 1, 3, 4)  # (B, H_kv, N, hd)
    cache.write(1, torch.tensor([[0, 1, 2], [0, 1, 2]]), k, -k)
    cache.commit([range(3), range(2)])
    cache.reserve(7)
    assert cache.capacity == 12 and all(t.shape == (2, 1, 12, 4) for t in (*cache.k, *cache.v))  # doubled until it fits
    keys, values = cache.view(1, 3)
    assert torch.equal(keys, k) and torch.equal(values, -k) and cache.lengths == [3, 2]
    cache.reserve(5)  # already fits: nothing moves
    assert cache.capacity == 12


@pytest.mark.parametrize("static", [False, True])
def test_kv_cache_keeps_rows_in_place(static):
    """A static runner's cache is one tensor per layer whose addresses survive dropping rows. Bugs:
    a stacked cache under compile (every layer's write becomes a scatter into the whole stack),
    keep_rows reallocating (every CUDA graph recorded again inside a timed step)."""
    import torch

    from jetflow_bench.engine import kv_cache

    cache = kv_cache.KVCache(2, 3, 1, 4, capacity=4, dtype=torch.float32, device=torch.device("cpu"), static=static)
    layers = (*cache.k, *cache.v)
    assert len({t.data_ptr() for t in layers}) == 4 and all(t.shape == (3, 1, 4, 4) for t in layers)
    assert all(t._base is None for t in layers) == static  # eager: views of one block
    for layer in range(2):
        rows = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 4) + 10 * layer  # row b holds b + 10 * layer
        cache.write(layer, torch.tensor([[0, 1]] * 3), rows, -rows)
    cache.advance([2, 1, 2])
    addresses = [t.data_ptr() for t in (*cache.k, *cache.v)]
    cache.keep_rows([2, 0])
    assert cache.lengths == [2, 2] and [t.data_ptr() for t in (*cache.k, *cache.v)] == addresses
    keys, values = cache.view(1, 2)
    assert keys[:, 0, :, 0].tolist() == [[12, 12], [10, 10]] and torch.equal(values, -keys)
    assert all(t._base is None for t in (*cache.k, *cache.v)) == static  # a view's base is guarded: new graphs
    cache.reserve(5)  # reallocates: a new capacity is a new graph anyway
    assert cache.k[0].shape == (2, 1, 8, 4) and cache.k[1][:, 0, :2, 0].tolist() == [[12, 12], [10, 10]]


@pytest.mark.parametrize("profile", [False, True])
def test_one_device_sync_per_step_unless_the_split_is_profiled(runner, monkeypatch, profile):
    """Bugs: a sync at every phase boundary on a GPU by default (seven per step distort every
    speed-up), or a default step record that reports a draft / verify split it never timed.

    The clock is told its device is a GPU (the runner stays on the CPU) and syncs are counted."""
    import torch

    from jetflow_bench.engine import loop, meter

    syncs = []
    monkeypatch.setattr(meter, "synchronize", syncs.append)

    class GpuClock(loop.Clock):
        def __init__(self, device: torch.device, split: bool) -> None:
            super().__init__(torch.device("cuda"), split)

    monkeypatch.setattr(loop, "Clock", GpuClock)
    prompts = repetitive_prompts(2, seed=3)
    result = generate(runner, prompts, StopRule(max_new_tokens=20), budget=16, drafter=DRAFTERS.get("ngram")(),
                      profile=profile)
    steps = 1 + max(s.batch_step for s in result.steps)
    assert sum(s.accepted for s in result.steps) > 0  # drafts were verified and kept
    around = 3  # batch start, first token, the batch's end
    if profile:  # seven phase boundaries, plus the finish time of a step where a request ends
        assert 7 * steps <= len(syncs) - around <= 8 * steps
    else:
        assert len(syncs) - around == steps
    assert {s.timing for s in result.steps} == {"split" if profile else "step"}
    if profile:
        assert all(s.verify_s > 0 and s.draft_s >= 0 for s in result.steps)
    else:
        assert all(math.isnan(s.draft_s) and math.isnan(s.verify_s) for s in result.steps)


def test_the_speculative_step_stays_the_algorithm():
    """Bug: clock stamps, counters or calibration records written back into the step (issue 55 moved
    them into `StepMeter`), until the algorithm no longer reads as draft -> verify -> accept -> commit."""
    import inspect

    from jetflow_bench.engine import loop

    assert len(inspect.getsourcelines(loop._speculative_step)[0]) <= 45
    assert "clock" not in inspect.getsource(loop._speculative_step)
