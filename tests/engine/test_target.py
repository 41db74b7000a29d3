"""Target runner parity: tree verification and KV compaction against plain forwards."""

import random

import pytest
import torch

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from tests.helpers.random_models import VOCAB, random_model, save_random_model


def random_tree(rng: random.Random, n: int, root: int) -> DraftTree:
    tokens, parents = [root], [-1]
    for i in range(1, n):
        parents.append(rng.randrange(max(0, i - 8), i))  # local parents -> deep trees as well as bushy ones
        tokens.append(rng.randrange(VOCAB))
    return DraftTree(tokens, parents)


def plain_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].float()


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen2"])
@pytest.mark.parametrize("gqa", [True, False])
@pytest.mark.parametrize("sizes", [(256,), (40, 3, 97)])
def test_tree_verification_equals_per_path_decoding(family, gqa, sizes):
    rng = random.Random(hash((family, gqa, sizes)) % 1000)
    model = random_model(family, gqa)
    runner = TargetRunner(model, None, family)
    prompts = [[rng.randrange(VOCAB) for _ in range(rng.randrange(2, 30))] for _ in sizes]
    runner.prefill(prompts, capacity=512)
    trees = [random_tree(rng, n, rng.randrange(VOCAB)) for n in sizes]
    out = runner.verify(trees)
    nodes = [(b, j) for b, t in enumerate(trees) for j in range(len(t))]
    for b, j in rng.sample(nodes, min(len(nodes), 60)):  # per-path forwards are the slow part
        path = [trees[b].tokens[i] for i in trees[b].path_to(j)]
        torch.testing.assert_close(out.logits[b, j], plain_logits(model, prompts[b] + path), atol=1e-4, rtol=0)


def test_prefill_scores_each_prompts_last_token_and_score_every_token():
    rng = random.Random(5)
    model = random_model("llama")
    runner = TargetRunner(model, None, "llama")
    prompts = [[rng.randrange(VOCAB) for _ in range(n)] for n in (7, 2, 12)]  # ragged: the last tokens differ in index
    out = runner.prefill(prompts, capacity=32)
    assert out.logits.shape == (3, 1, VOCAB)
    for b, p in enumerate(prompts):
        torch.testing.assert_close(out.logits[b, 0], plain_logits(model, p), atol=1e-4, rtol=0)
    runner.release()
    scored = runner.score(prompts).logits  # (B, N, V): every token, for training targets
    torch.testing.assert_close(scored[2, 4], plain_logits(model, prompts[2][:5]), atol=1e-4, rtol=0)


def test_commit_then_continue_equals_fresh_prefill():
    rng = random.Random(3)
    model = random_model("qwen3")
    runner = TargetRunner(model, None, "qwen3")
    prompts = [[rng.randrange(VOCAB) for _ in range(n)] for n in (9, 4, 17)]
    runner.prefill(prompts, capacity=256)
    committed = [list(p) for p in prompts]
    roots = [rng.randrange(VOCAB) for _ in prompts]
    for _ in range(3):  # several rounds: trees, accept a random path, continue
        trees = [random_tree(rng, rng.randrange(1, 30), root) for root in roots]
        runner.verify(trees)
        paths = [t.path_to(rng.randrange(len(t))) for t in trees]
        runner.commit(paths)
        for b, (t, path) in enumerate(zip(trees, paths, strict=True)):
            committed[b] += [t.tokens[i] for i in path]
        roots = [rng.randrange(VOCAB) for _ in prompts]
    out = runner.verify([DraftTree.root_only(r) for r in roots])
    for b in range(len(prompts)):
        torch.testing.assert_close(out.logits[b, 0], plain_logits(model, committed[b] + [roots[b]]), atol=1e-4, rtol=0)
    runner.keep_rows([2, 0])  # dropping a finished row keeps the others intact
    out = runner.verify([DraftTree.root_only(roots[2]), DraftTree.root_only(roots[0])])
    torch.testing.assert_close(out.logits[0, 0], plain_logits(model, committed[2] + [roots[2]]), atol=1e-4, rtol=0)


def test_taps_are_the_chosen_layer_outputs():
    model = random_model("qwen3", layers=4)
    runner = TargetRunner(model, None, "qwen3")
    prompt = [5, 6, 7, 8]
    out = runner.prefill([prompt], capacity=16, taps=(3, 0, 2))
    with torch.no_grad():
        ref = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states  # (embeddings, layer 0, ...)
    assert out.hidden.shape == (1, 4, 3, 64)  # taps handed over in the order asked for: 3, 0, 2
    torch.testing.assert_close(out.hidden[0, :, 1], ref[1][0], atol=1e-5, rtol=0)  # layer 0 output
    torch.testing.assert_close(out.hidden[0, :, 2], ref[3][0], atol=1e-5, rtol=0)  # layer 2 output
    # HF applies the final norm to its last hidden state; the tap is the final layer's raw output
    with torch.no_grad():
        torch.testing.assert_close(runner.norm(out.hidden[0, :, 0]), ref[4][0], atol=1e-5, rtol=0)
    runner.release()
    with pytest.raises(JfbenchError, match="tap layers"):
        runner.prefill([prompt], capacity=16, taps=(5,))


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_loads_saved_models_by_path(tmp_path, family):
    path = save_random_model(tmp_path / family, family)
    runner = TargetRunner.load(path, device="cpu")
    assert runner.eos_token_ids == (1,)
    out = runner.prefill([[3, 4, 5]], capacity=8)
    assert out.logits.shape == (1, 1, VOCAB)  # the last prompt token's only


def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(JfbenchError, match="no such folder"):  # a path is never sent to the hub
        TargetRunner.load(tmp_path / "no_such_model", device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(JfbenchError, match="cannot load target"):
        TargetRunner.load(tmp_path / "empty", device="cpu")
    runner = TargetRunner(random_model("qwen3"), None, "qwen3")
    with pytest.raises(JfbenchError, match="longer than the target's context"):
        runner.prefill([[1] * 1100], capacity=2000)
    runner.prefill([[1, 2, 3]], capacity=10)
    with pytest.raises(JfbenchError, match="does not fit the KV cache"):
        runner.verify([DraftTree.chain(list(range(9)))])


def test_a_live_batch_is_never_silently_replaced():
    runner = TargetRunner(random_model("qwen3"), None, "qwen3")
    runner.prefill([[3, 4, 5]], capacity=16)
    live = runner.cache
    with pytest.raises(RuntimeError, match="release"):
        runner.prefill([[6, 7]], capacity=16)
    scored = runner.score([[6, 7, 8]], taps=(1,))  # a one-off forward leaves the live batch alone
    assert runner.cache is live and live.lengths == [3]
    assert scored.logits.shape == (1, 3, VOCAB) and scored.hidden.shape == (1, 3, 1, 64)
    runner.release()
    runner.prefill([[6, 7]], capacity=16)
    assert runner.cache.lengths == [2]
