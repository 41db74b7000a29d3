"""`--compile`: bucketed static shapes, and greedy outputs identical to the eager engine."""

import shutil

import pytest
import torch

from drafters import DRAFTERS
from drafters.head_cache import StaticHead
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.compiled import (
    StaticForward,
    buckets_up_to,
    check_compile,
    pad_visibility,
    round_capacity,
    tree_bucket,
)
from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.kv_cache import KVCache
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from tests.helpers.random_models import random_model, repetitive_prompts

HAVE_COMPILER = any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "c++"))


def runners(layers: int = 1) -> tuple[TargetRunner, TargetRunner]:
    """An eager and a compiled runner over the same weights (compiling 1 layer on 2 cores takes ~1 min a graph)."""
    model = random_model("qwen3", seed=1, layers=layers)
    return TargetRunner(model, None, "random"), TargetRunner(model, None, "random", compile=True)


def uncompiled(runner: TargetRunner) -> TargetRunner:
    """The static-shape step with its layers run as written (what Inductor would compile, uncompiled)."""
    runner.static.layer = runner.static._layer
    return runner


def test_buckets_round_up_and_stop_at_the_largest():
    assert [tree_bucket(n) for n in (1, 2, 16, 17, 64, 65, 256, 1024)] == [1, 16, 16, 64, 64, 256, 256, 1024]
    assert buckets_up_to(1) == (1,) and buckets_up_to(17) == (1, 16, 64)
    assert round_capacity(1) == 512 and round_capacity(513) == 1024
    with pytest.raises(JfbenchError, match="largest compiled bucket"):
        tree_bucket(1025)


def test_padding_entries_see_only_themselves():
    seen = torch.tensor([[[True, True, False], [True, False, True]]])  # 2 queries, the last 2 of 3 entries
    padded = pad_visibility(seen, 4)
    assert padded.shape == (1, 4, 5) and torch.equal(padded[0, :2, :3], seen[0])
    assert padded[0, 2].tolist() == [False, False, False, True, False]
    assert padded[0, 3].tolist() == [False, False, False, False, True]
    assert not padded[0, :2, 3:].any()


def test_compile_rejects_kernel_backends_and_missing_compilers(monkeypatch):
    with pytest.raises(JfbenchError, match="--attention 'triton'"):
        check_compile(torch.device("cpu"), "triton")
    monkeypatch.setattr(shutil, "which", lambda _: None)
    with pytest.raises(JfbenchError, match="C/C\\+\\+ compiler"):
        check_compile(torch.device("cpu"), "sdpa")


def test_padded_forward_matches_eager_without_the_compiler():
    """The padding, the whole-cache mask and the scratch slots, run uncompiled: a padding node that
    leaked into a real node's attention, or a real node written over, would change the logits."""
    eager, static = runners(layers=2)
    uncompiled(static)
    prompts = repetitive_prompts(2)
    tree = [DraftTree([5, 6, 7, 8, 9], [-1, 0, 0, 1, 1]), DraftTree([3, 4], [-1, 0])]
    for runner in (eager, static):
        runner.prefill(prompts, capacity=64)
    out_eager, out_static = eager.verify(tree, taps=(0,)), static.verify(tree, taps=(0,))
    assert out_static.trees.width == 16 and out_static.trees.kv_len == static.cache.capacity == 512
    assert static.cache.static and not eager.cache.static  # one graph input per layer when compiled
    torch.testing.assert_close(out_static.logits, out_eager.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_static.hidden, out_eager.hidden, rtol=1e-5, atol=1e-5)
    eager.commit([[0, 2], [0, 1]])
    static.commit([[0, 2], [0, 1]])
    chain = [DraftTree.root_only(1), DraftTree.root_only(2)]  # reads the committed, compacted keys
    torch.testing.assert_close(static.verify(chain).logits, eager.verify(chain).logits, rtol=1e-5, atol=1e-5)


def addresses(cache: KVCache) -> list[int]:
    return [t.data_ptr() for t in (*cache.k, *cache.v)]


def recording_addresses(forward: StaticForward, body, at: int) -> list[list[int]]:
    """Run ``body`` uncompiled as ``forward``'s graph, noting the addresses of the cache it is given
    as argument ``at``: CUDA graphs replay only at the addresses they recorded."""
    seen = []
    forward.fn = lambda *args: seen.append(addresses(args[at])) or body(*args)
    return seen


def test_a_compiled_runner_runs_its_warm_up_and_every_batch_on_one_cache():
    """Uncompiled bodies. Bug: a new cache per batch (or a warm-up on a
    cache of its own), whose new addresses make CUDA graphs re-record inside the batch's first
    timed step, and past torch's re-record limit run without graphs. A batch larger than the cache
    holds reallocates (a new graph anyway); a reused cache decodes as a new one."""
    eager, static = runners(layers=2)
    seen = recording_addresses(uncompiled(static).static.forward, static.static._body, at=4)
    static.warm_up(3, 16, 64)
    warmed = len(seen)
    tree = [DraftTree([5, 6, 7], [-1, 0, 0])] * 3
    for prompts in (repetitive_prompts(3), repetitive_prompts(2, seed=1)):
        for runner in (eager, static):
            runner.prefill(prompts, capacity=64)
        out_static, out_eager = static.verify(tree[: len(prompts)]), eager.verify(tree[: len(prompts)])
        torch.testing.assert_close(out_static.logits[:, :3], out_eager.logits, rtol=1e-5, atol=1e-5)
        assert static.cache.lengths == eager.cache.lengths
        for runner in (eager, static):
            runner.release()
    assert len(seen) > warmed > 1 and all(a == seen[0] for a in seen)  # warm-up (batches 1, 3) and both decodes
    static.prefill(repetitive_prompts(4), capacity=64)
    assert addresses(static.cache) != seen[0] and static.cache.rows_held == 4


def test_score_during_a_compiled_batch_leaves_its_cache_and_capacity_alone():
    """`score` (training targets, tie checks) runs on a fresh cache: on the persistent one it would
    overwrite the live batch's entries, and a long scored prompt once raised the capacity every
    compiled graph was warmed at (a new graph, compiled inside a timed step)."""
    eager, static = runners(layers=2)
    uncompiled(static)
    prompts = repetitive_prompts(2)
    for runner in (eager, static):
        runner.prefill(prompts, capacity=64)
    live, before = static.cache, [t.clone() for t in (*static.cache.k, *static.cache.v)]
    long = [[3 + i % 50 for i in range(600)]] * 3
    torch.testing.assert_close(static.score(long).logits, eager.score(long).logits, rtol=1e-5, atol=1e-5)
    assert static.cache is live and static.static.capacity == 512 and live.lengths == eager.cache.lengths
    assert all(torch.equal(a, b) for a, b in zip(before, (*live.k, *live.v), strict=True))
    tree = [DraftTree([5, 6], [-1, 0])] * 2
    torch.testing.assert_close(static.verify(tree).logits, eager.verify(tree).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # ~2 min: Inductor compiles 4 graphs on 2 cores
@pytest.mark.skipif(not HAVE_COMPILER, reason="no C/C++ compiler on PATH: Inductor cannot build CPU kernels")
def test_compiled_greedy_decoding_is_identical_to_eager():
    """Inductor on CPU: AR and ngram (budget 16) outputs equal the eager engine's, drafts are kept,
    every graph is compiled in the untimed warm-up, and a rerun compiles nothing."""
    eager, compiled = runners()
    prompts = repetitive_prompts(3)
    stop = StopRule(max_new_tokens=24, eos_token_ids=frozenset({1}))
    reference = [r.output_tokens for r in generate(eager, prompts, stop).requests]
    first = generate(compiled, prompts, stop, budget=16, drafter=DRAFTERS.get("ngram")())
    assert [r.output_tokens for r in first.requests] == reference
    assert sum(s.accepted for s in first.steps) > 0 and first.compile_s > 0
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    again = generate(compiled, prompts[:2], stop)  # AR, a smaller batch: shapes warmed above
    assert [r.output_tokens for r in again.requests] == reference[:2]
    assert again.compile_s == 0.0 and torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


@pytest.mark.slow  # ~30 s: Inductor compiles one layer with its caches off
@pytest.mark.skipif(not HAVE_COMPILER, reason="no C/C++ compiler on PATH: Inductor cannot build CPU kernels")
def test_a_compiled_layer_writes_its_cache_entries_without_rewriting_the_cache():
    """Regional compilation: the AR step of 3 layers compiles ONE layer graph, which reads that
    layer's weights and keys/values (attention spans the whole cache) and writes one entry:
    Inductor's byte count stays under a layer's weights + 2 x its cache. Bugs: a graph per layer
    (no reuse: 3 graphs), and a stacked (L, B, H_kv, T, hd) cache, whose per-layer writes
    functionalization turns into scatters rebuilding the whole stack."""
    from torch._inductor import metrics

    layers = 3
    torch._dynamo.reset()  # an earlier test's layer graph of the same shape would be reused, not compiled
    _, compiled = runners(layers)
    layer_weights = sum(p.numel() * p.element_size() for p in compiled.layers[0].parameters())
    metrics.reset()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._logging.set_logs(inductor_metrics=True)  # Inductor counts bytes only while this log is on
    try:
        with torch._inductor.config.patch(force_disable_caches=True):  # a cached graph is not counted
            compiled.warm_up(1, 1, 64)
    finally:
        torch._logging.set_logs()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 1
    cache = compiled.static.take(1, 64)
    layer_cache = cache.k[0].nbytes + cache.v[0].nbytes
    assert layer_cache == 2 * 2 * 512 * 16 * 4  # K and V, 2 kv heads x 512 slots x 16 dims, float32
    assert layer_weights < metrics.num_bytes_accessed < layer_weights + 2 * layer_cache


def first_proposals(runner: TargetRunner, drafter: Drafter, prompts: list[list[int]], budget: int) -> list:
    """Prefill on ``runner``, report the prompts to the drafter, propose once: (tokens, parents) per row."""
    out = runner.prefill(prompts, capacity=max(map(len, prompts)) + 64, taps=drafter.taps)
    seqs = [SequenceView(i, [*p, int(out.logits[i, 0].argmax())], len(p)) for i, p in enumerate(prompts)]
    drafter.reset(seqs)
    drafter.observe(seqs, [out.hidden[i, : len(p)] for i, p in enumerate(prompts)])
    runner.release()
    return [(t.tokens, t.parents) for t in drafter.propose(seqs, budget)]


def padded(drafter: Drafter, device: torch.device) -> Drafter:
    """The drafter with `StaticHead`'s padded, whole-cache head forwards run uncompiled."""
    drafter.static = StaticHead(drafter.head, device)
    drafter.static.forward.fn = drafter.static._body  # the body torch.compile would trace, run as is
    return drafter


@pytest.mark.parametrize("name", ["jetflow-refine", "dflash", "eagle", "eagle3"])
def test_padded_random_heads_draft_what_eager_heads_draft(tmp_path, name):
    """Untrained heads on a random target, no compiler: padding entries, the whole-cache mask and the
    scratch slots leave every proposed tree and cost counter as the eager head's (eagle3: a published
    EAGLE-3 head with a reduced draft vocabulary)."""
    from tests.helpers.eagle3_heads import write_specforge_head
    from tests.helpers.heads import HEADS, make_head, save_target

    runner = TargetRunner.load(save_target(tmp_path / "target"), device="cpu")
    cls = DRAFTERS.get(name)
    checkpoint = (write_specforge_head(tmp_path / "head", draft_vocab=40) if name == "eagle3"
                  else make_head(runner, tmp_path / "head", cls.train_name(), HEADS[cls.train_name()]))
    eager, static = cls.build(runner, checkpoint), padded(cls.build(runner, checkpoint), runner.device)
    prompts = [[3, 4, 5, 6, 7, 8, 9], [10, 11, 12]]
    assert first_proposals(runner, static, prompts, 16) == first_proposals(runner, eager, prompts, 16)
    assert static.take_cost(2) == eager.take_cost(2)


def test_refinement_wider_than_the_largest_bucket_is_refused_naming_the_budget(tmp_path):
    """jetflow-refine's refinement forward runs up to 2 x budget entries: past budget 512 under
    --compile it once stopped with "a tree of 1200 nodes exceeds ... lower the budget", naming
    neither the drafter nor the budget the user gave."""
    from tests.helpers.heads import HEADS, make_head, save_target

    runner = TargetRunner.load(save_target(tmp_path / "target"), device="cpu")
    refine = padded(DRAFTERS.get("jetflow-refine").build(runner, make_head(runner, tmp_path / "head", "jetflow",
                                                                          HEADS["jetflow"])), runner.device)
    assert refine.static_shapes(512)[0][-1] == 1024
    with pytest.raises(JfbenchError, match=r"jetflow-refine.*budget 600.*budgets <= 512 with --compile"):
        refine.static_shapes(600)


def test_compiled_budget_limits_are_checked_before_any_model_loads(cli, tmp_path):
    """The same refusal from the arm's options alone: it once came only at the drafter's warm-up,
    after the target had loaded and the AR cells had run."""
    from jetflow_bench.core.budget_policy import Budget
    from jetflow_bench.sweep.arms import check_compiled_budgets
    from jetflow_bench.sweep.grid import DrafterSpec

    plain, refine = DrafterSpec("jetflow"), DrafterSpec("jetflow-refine")
    check_compiled_budgets([plain, refine, DrafterSpec("eagle")], [Budget.fixed(16), Budget.fixed(512)])
    check_compiled_budgets([DrafterSpec("jetflow-refine", options=(("refine_passes", 0),))], [Budget.fixed(1024)])
    check_compiled_budgets([plain], [Budget.fixed(1024)])
    with pytest.raises(JfbenchError, match=r"jetflow\[refine_passes=2\] drafts at most budget 512.*not budget 1024"):
        check_compiled_budgets([DrafterSpec("jetflow", options=(("refine_passes", 2),))], [Budget.fixed(1024)])
    with pytest.raises(JfbenchError, match="not budget 600"):
        check_compiled_budgets([refine], [Budget.auto((16, 600))])

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")  # read for its family before the budgets are checked; records none
    # a hub id that cannot load: the refusal must come before any model (or hub) is tried
    code, out, err = cli("sweep", "--target", "no-org/no-such-model", "--out", str(tmp_path / "run"), "--device", "cpu",
                         "--compile", "--drafters", f"jetflow-refine={head}", "--budgets", "16,600", "--suites", "gsm8k")
    assert code == 2 and out == ""
    assert err.startswith("error: --compile: jetflow-refine") and "budgets <= 512" in err and err.count("\n") == 1


def test_head_warm_up_runs_each_shape_once_and_sizes_every_later_cache(tmp_path):
    """Uncompiled bodies, so only the bookkeeping runs: a warm-up that skipped a batch class or
    bucket, ran one twice, or left the context cache smaller than a decode's scratch would compile
    (or grow the cache, a new shape) inside a timed step."""
    from tests.helpers.heads import HEADS, make_head, save_target

    runner = TargetRunner.load(save_target(tmp_path / "target"), device="cpu")
    drafter = padded(DRAFTERS.get("jetflow-refine").build(runner, make_head(runner, tmp_path / "head", "jetflow",
                                                                           HEADS["jetflow"])), runner.device)
    ran = []
    body = drafter.static.forward.fn
    drafter.static.forward.fn = lambda x, *rest: ran.append(tuple(x.shape[:2])) or body(x, *rest)
    widths, scratch = drafter.static_shapes(16)
    drafter.warm_up(3, 16, 700)
    assert sorted(ran) == sorted((rows, w) for rows in (1, 3) for w in widths)  # CPU: batch 1 and the dynamic batch
    assert drafter.warm_up(3, 16, 700) == 0.0 and len(ran) == 2 * len(widths)
    assert drafter.static.capacity == round_capacity(700 + scratch)
    assert drafter.new_cache([SequenceView(0, [1, 2], 2)]).kv.capacity == drafter.static.capacity


def test_a_compiled_head_runs_its_warm_up_and_every_batch_on_one_context_cache(tmp_path):
    """`StaticHead`'s context cache, as the target's (uncompiled body):
    warm-up and each batch's drafting forwards see the same addresses, a reused cache drafts the
    eager head's trees, and a larger batch reallocates it."""
    from tests.helpers.heads import HEADS, make_head, save_target

    runner = TargetRunner.load(save_target(tmp_path / "target"), device="cpu")
    checkpoint = make_head(runner, tmp_path / "head", "jetflow", HEADS["jetflow"])
    cls = DRAFTERS.get("jetflow-refine")
    eager, static = cls.build(runner, checkpoint), padded(cls.build(runner, checkpoint), runner.device)
    seen = recording_addresses(static.static.forward, static.static._body, at=4)
    static.warm_up(3, 16, 64)
    warmed = len(seen)
    for prompts in ([[3, 4, 5, 6, 7, 8, 9], [10, 11, 12], [4, 4, 5]], [[13, 14, 15, 16], [5, 6, 7, 8, 9]]):
        assert first_proposals(runner, static, prompts, 16) == first_proposals(runner, eager, prompts, 16)
    assert len(seen) > warmed > 1 and all(a == seen[0] for a in seen)  # warm-up (batches 1, 3) and both proposals
    kv = static.new_cache([SequenceView(i, [1, 2], 2) for i in range(4)]).kv
    assert addresses(kv) != seen[0] and kv.rows_held == 4


@pytest.mark.skipif(not HAVE_COMPILER, reason="no C/C++ compiler on PATH: a compiled runner cannot be built")
def test_a_compiled_target_compiles_its_heads_through_sdpa_only(tmp_path):
    from tests.helpers.heads import HEADS, make_head, save_target

    eager = TargetRunner.load(save_target(tmp_path / "target"), device="cpu")
    compiled = TargetRunner(eager.model, eager.tokenizer, eager.name, compile=True)
    checkpoint = make_head(eager, tmp_path / "head", "dflash", HEADS["dflash"])
    dflash = DRAFTERS.get("dflash")
    assert dflash.build(eager, checkpoint).static is None and dflash.build(compiled, checkpoint).static is not None
    with pytest.raises(JfbenchError, match="--attention 'triton'"):
        dflash.build(compiled, checkpoint, attention="triton")


@pytest.mark.slow  # trains three quick heads on micro unless cached (then seconds)
@pytest.mark.parametrize(("name", "budget"), [("jetflow", 16), ("jetflow-refine", 16), ("dflash", 16), ("eagle", 16),
                                              ("eagle3", 64)])
def test_padded_head_forwards_draft_what_the_eager_head_drafts(micro_target, learned_heads, name, budget):  # noqa: F811
    """The head's padded, whole-cache forward (`StaticHead`) run uncompiled: the same trees, the same
    cost counters (padding is not counted) and the same greedy decode, drafts accepted."""
    runner = TargetRunner.load(micro_target, device="cpu")
    cls = DRAFTERS.get(name)
    eager, static = (cls.build(runner, learned_heads[cls.train_name()]) for _ in range(2))
    static = padded(static, runner.device)
    prompts = repetitive_prompts(2)
    assert first_proposals(runner, static, prompts, budget) == first_proposals(runner, eager, prompts, budget)
    assert static.take_cost(2) == eager.take_cost(2)
    stop = StopRule(max_new_tokens=24)
    reference, result = (generate(runner, prompts, stop, budget=budget, drafter=d) for d in (eager, static))
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests]
    assert sum(s.accepted for s in result.steps) > 0


@pytest.mark.slow  # minutes when Inductor compiles the ~16 graphs cold on 2 cores; seconds from its on-disk cache
@pytest.mark.skipif(not HAVE_COMPILER, reason="no C/C++ compiler on PATH: Inductor cannot build CPU kernels")
def test_compiled_heads_draft_and_decode_like_eager_heads(micro_target, learned_heads):  # noqa: F811
    """Inductor on CPU, target and heads compiled: each learned arm's greedy output equals the eager
    engine's with drafts accepted, its compiled head proposes the eager head's trees from the same
    target features, and the warm-up compiled every graph those proposals needed."""
    eager = TargetRunner.load(micro_target, device="cpu")
    compiled = TargetRunner(eager.model, eager.tokenizer, eager.name, compile=True)
    prompts = repetitive_prompts(2)
    stop = StopRule(max_new_tokens=24)
    for name in ("jetflow", "dflash", "eagle"):
        cls = DRAFTERS.get(name)
        on_eager, on_compiled = (cls.build(r, learned_heads[name]) for r in (eager, compiled))
        assert on_eager.static is None and on_compiled.static is not None
        reference = generate(eager, prompts, stop, budget=16, drafter=on_eager)
        warmed = graphs_after(on_compiled, "warm_up")
        result = generate(compiled, prompts, stop, budget=16, drafter=on_compiled)
        assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests], name
        assert sum(s.accepted for s in result.steps) > 0 and result.compile_s > 0, name
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        assert graphs == warmed[-1], f"{name}: {graphs - warmed[-1]} graphs compiled inside timed steps"
        assert first_proposals(eager, on_compiled, prompts, 16) == first_proposals(eager, on_eager, prompts, 16), name
        again = generate(compiled, prompts[:1], stop, budget=16, drafter=on_compiled)  # batch 1: warmed above
        assert again.compile_s == 0.0 and torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs, name


def graphs_after(drafter: Drafter, method: str) -> list[int]:
    """Wrap ``drafter.method`` (the last warm-up before a decode's clock starts) to record how many
    graphs Dynamo had compiled when it returned; the list fills as it is called."""
    seen, original = [], getattr(drafter, method)

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        return out

    setattr(drafter, method, wrapped)
    return seen


def fake_cuda_graphs(monkeypatch) -> list[tuple]:
    """Static-shape steps recorded as "CUDA graphs" on the CPU: a recording runs the step on its
    input buffers, and a replay runs it again on whatever those buffers and the cache hold then,
    writing into the recorded outputs — what a real replay does at the recorded addresses. Returns
    the list each recording is appended to."""
    from jetflow_bench.engine import compiled

    recorded = []

    def record(run, pool):
        run()  # the side-stream run before the capture
        outputs = run()

        def replay():
            for out, new in zip(outputs, run(), strict=True):
                if out is not None:
                    out.copy_(new)

        recorded.append(tuple(None if t is None else tuple(t.shape) for t in outputs))
        return outputs, replay, "pool"

    monkeypatch.setattr(compiled, "records_cuda_graphs", lambda device: True)
    monkeypatch.setattr(compiled, "record_cuda_graph", record)
    return recorded


def recordings_after(owner, recorded: list) -> list[int]:
    """Wrap ``owner.warm_up`` to note how many recordings existed when it returned; fills as it runs."""
    seen, original = [], owner.warm_up

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(len(recorded))
        return out

    owner.warm_up = wrapped
    return seen


def test_graphs_need_cuda_and_say_so_in_one_line(cli, tmp_path):
    model = random_model("qwen3", seed=1, layers=1)
    with pytest.raises(JfbenchError, match="--graphs records CUDA graphs, which need a CUDA device, not cpu"):
        TargetRunner(model, None, "random", compile="graphs")
    for flags, said in ((["--graphs"], "need a CUDA device"), (["--graphs", "--compile"], "pick one")):
        code, out, err = cli("sweep", "--target", "no-org/no-such-model", "--out", str(tmp_path / "run"), "--device",
                             "cpu", *flags, "--drafters", "ngram", "--suites", "gsm8k")
        assert code == 2 and out == "" and err.count("\n") == 1 and said in err, err


def test_graph_mode_decodes_what_eager_decodes_and_records_only_in_the_warm_up(monkeypatch):
    """`--graphs` on fake CUDA graphs: greedy AR and ngram outputs equal the eager engine's,
    with drafts accepted, and every recording happens in the untimed warm-up (a second decode
    records nothing). Bugs caught: a replay on stale input buffers (the new step's tokens not
    copied in), outputs read after the next replay overwrote them, a recording keyed without the
    cache's addresses (a reallocated cache replayed into the old one), no layer left uncompiled."""
    recorded = fake_cuda_graphs(monkeypatch)
    model = random_model("qwen3", seed=1, layers=2)
    eager, graphs = TargetRunner(model, None, "random"), TargetRunner(model, None, "random", compile="graphs")
    assert graphs.static.layer == graphs.static._layer  # graphs compile nothing
    stop = StopRule(max_new_tokens=24, eos_token_ids=frozenset({1}))
    warmed = recordings_after(graphs, recorded)
    for prompts in (repetitive_prompts(3), repetitive_prompts(4, seed=1)):  # the second batch reallocates the cache
        reference = [r.output_tokens for r in generate(eager, prompts, stop, budget=16,
                                                      drafter=DRAFTERS.get("ngram")()).requests]
        result = generate(graphs, prompts, stop, budget=16, drafter=DRAFTERS.get("ngram")())
        assert [r.output_tokens for r in result.requests] == reference
        assert sum(s.accepted for s in result.steps) > 0 and result.compile_s > 0
        assert len(recorded) == warmed[-1]  # nothing recorded inside the timed decode
    widths = {shape[0][1] for shape in recorded}
    assert widths == {1, 16} and len(recorded) == len(graphs.static.forward.graphs) == 2 * (3 + 4)  # batches 1..3, then 1..4
    again = generate(graphs, repetitive_prompts(2), stop)
    assert again.compile_s == 0.0 and len(recorded) == 14
    assert [r.output_tokens for r in again.requests] == [r.output_tokens for r in generate(eager, repetitive_prompts(2),
                                                                                              stop).requests]


@pytest.mark.parametrize("name", ["jetflow", "dflash"])
def test_graph_mode_block_heads_draft_what_eager_heads_draft(tmp_path, monkeypatch, name):
    """The block heads' pass under `--graphs` (fake CUDA graphs): the same trees and greedy
    decode as the eager head, drafts accepted, the head's recordings made in its warm-up."""
    from tests.helpers.heads import HEADS, make_head, save_target

    recorded = fake_cuda_graphs(monkeypatch)
    eager = TargetRunner.load(save_target(tmp_path / "target"), device="cpu")
    graphs = TargetRunner(eager.model, eager.tokenizer, eager.name, compile="graphs")
    checkpoint = make_head(eager, tmp_path / "head", name, HEADS[name])
    on_eager, on_graphs = (DRAFTERS.get(name).build(r, checkpoint) for r in (eager, graphs))
    assert on_graphs.static is not None and on_graphs.static.forward.fn == on_graphs.static._body
    prompts = repetitive_prompts(2)
    stop = StopRule(max_new_tokens=16)
    warmed = recordings_after(on_graphs, recorded)  # the drafter's warm-up is the last before the clock
    reference = generate(eager, prompts, stop, budget=16, drafter=on_eager)
    result = generate(graphs, prompts, stop, budget=16, drafter=on_graphs)
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests]
    assert sum(s.accepted for s in result.steps) > 0 and on_graphs.static.forward.graphs
    assert len(recorded) == warmed[-1]  # every head and target shape was recorded before the clock started


def test_regional_compilation_traces_one_layer_for_every_layer(monkeypatch):
    """`--compile` traces the decoder layer once per shape and every layer reuses it (Dynamo's
    eager backend stands in for Inductor, so the test compiles nothing). Bug: a region that
    depends on which layer calls it (its index, a per-layer closure), traced once per layer."""
    import functools

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    eager, compiled = runners(layers=3)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled.warm_up(1, 16, 64)  # batch 1, buckets 1 and 16
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 2
    prompts = repetitive_prompts(1)
    stop = StopRule(max_new_tokens=12)
    reference = generate(eager, prompts, stop, budget=16, drafter=DRAFTERS.get("ngram")())
    result = generate(compiled, prompts, stop, budget=16, drafter=DRAFTERS.get("ngram")())
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 2


def test_free_memory_check_on_cuda_asks_the_driver(monkeypatch):
    """The CUDA branch of the memory check, on a CPU: it once named `torch` without importing it."""
    from jetflow_bench.core.runtime import available_memory_bytes

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (123 << 20, 456 << 20))
    assert available_memory_bytes(torch.device("cuda")) == 123 << 20
