"""The shared draft head: masks, context cache, checkpoints (own + released formats), proposals.

Uses small random Qwen3 targets and untrained heads: these properties hold for any weights.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file

from drafters import DRAFTERS
from drafters.head_cache import ContextCache
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree, pad_trees
from jetflow_bench.heads.checkpoint import TargetShape, default_taps, load_head, save_head
from jetflow_bench.heads.head import DraftHead
from jetflow_bench.heads.masks import block_allowed, context_allowed, join, tree_allowed
from tests.helpers.heads import HEADS, PROMPTS, head_config, make_head, observed_cache, save_target
from tests.helpers.random_models import VOCAB


def test_default_taps_follow_dflash_on_deep_targets():
    assert default_taps(36, 5) == [1, 9, 17, 25, 33]  # z-lab Qwen3-8B DFlash heads
    assert default_taps(36, 1) == [18]
    assert default_taps(14, 3) == [1, 6, 11]  # the deep toy target: 1 .. L-3
    assert default_taps(6, 3) == [0, 2, 4]  # tiny: never the final layer
    assert default_taps(3, 3) == [0, 1, 2]  # micro: no layer to spare
    for layers in range(4, 40):  # the final layer is tapped only when there are no layers to spare
        assert layers - 1 not in default_taps(layers, 3)


def test_head_depth_scales_with_the_target():
    from jetflow_bench.training.config import default_head_layers

    assert [default_head_layers("jetflow", n) for n in (3, 6, 14, 36)] == [2, 2, 2, 5]
    assert default_head_layers("eagle", 36) == 1


def test_block_masks_keep_blocks_apart():
    causal = block_allowed("causal", 2, 3)
    assert causal[4].tolist() == [False, False, False, True, True, False]
    bidirectional = block_allowed("bidirectional", 2, 3)
    assert bidirectional[1].tolist() == [True, True, True, False, False, False]
    with pytest.raises(JfbenchError, match="mode"):
        block_allowed("sideways", 1, 2)


def run_entries(head: DraftHead, cache: ContextCache, tokens, parents, is_mask, allowed) -> torch.Tensor:
    tokens = torch.tensor(tokens)[None]
    depths = pad_trees([DraftTree(tokens[0].tolist(), parents)])[2]
    x = head.block_inputs(tokens, torch.tensor(is_mask)[None])
    positions = cache.anchor_positions()[:, None] + depths
    mask = cache.mask(allowed, x.dtype)
    with torch.inference_mode():
        return head(x, positions, mask, cache.scratch(0, tokens.shape[1]))[0]


def test_tree_mode_never_reads_siblings_or_descendants(target, checkpoints):
    head, _ = load_head(checkpoints["jetflow"], target)
    cache, _ = observed_cache(target, head, PROMPTS[:1])
    parents = [-1, 0, 0, 1, 0]  # root; a, b; a's child c; MASK query of the root
    is_mask = [False, False, False, False, True]
    allowed = tree_allowed(torch.tensor([parents]), pad_trees([DraftTree([1] * 5, parents)])[2])
    base = run_entries(head, cache, [1, 20, 21, 22, 0], parents, is_mask, allowed)
    other_b = run_entries(head, cache, [1, 20, 30, 22, 0], parents, is_mask, allowed)
    other_c = run_entries(head, cache, [1, 20, 21, 31, 0], parents, is_mask, allowed)
    unaffected_by_b = [0, 1, 3, 4]
    torch.testing.assert_close(base[unaffected_by_b], other_b[unaffected_by_b])
    assert not torch.allclose(base[2], other_b[2])
    torch.testing.assert_close(base[[0, 1, 2, 4]], other_c[[0, 1, 2, 4]])


@pytest.mark.parametrize("mode", ["causal", "bidirectional"])
def test_bidirectional_block_sees_the_whole_block(target, checkpoints, mode):
    head, _ = load_head(checkpoints["jetflow"], target)
    head = DraftHead(dataclasses.replace(head.cfg, mode=mode), target.embed, target.lm_head)
    head.init_weights(1)
    cache, _ = observed_cache(target, head, PROMPTS[:1])
    allowed = block_allowed(mode, 1, 4)
    first = run_entries(head, cache, [1, 20, 21, 22], [-1, 0, 1, 2], [False] * 4, allowed)
    changed_last = run_entries(head, cache, [1, 20, 21, 40], [-1, 0, 1, 2], [False] * 4, allowed)
    same_prefix = torch.allclose(first[:3], changed_last[:3])
    assert same_prefix == (mode == "causal")


def test_context_cache_grows_and_matches_one_shot_features(target, checkpoints):
    head, _ = load_head(checkpoints["dflash"], target)
    out = target.score([PROMPTS[0]], taps=head.cfg.taps)
    features = out.hidden[0, : len(PROMPTS[0])]
    whole = ContextCache(head, [0], capacity=64)
    whole.append([features])
    pieces = ContextCache(head, [0], capacity=2)
    pieces.append([features[:3]])
    pieces.append([features[3:]])
    n = len(PROMPTS[0])
    assert pieces.lengths == whole.lengths == [n]
    for piece, one in zip(pieces.kv.k, whole.kv.k, strict=True):
        torch.testing.assert_close(piece[:, :, :n], one[:, :, :n])
    torch.testing.assert_close(pieces.last_feature, whole.last_feature)


def test_rows_follow_the_engine_when_requests_finish(target, checkpoints):
    head, _ = load_head(checkpoints["dflash"], target)
    cache, seqs = observed_cache(target, head)
    kept = [k[1:2, :, : len(PROMPTS[1])].clone() for k in cache.kv.k]
    cache.align(seqs[1:])
    assert cache.requests == [1]
    torch.testing.assert_close([k[:, :, : len(PROMPTS[1])] for k in cache.kv.k], kept)


def test_cache_mask_sees_each_rows_own_context_and_follows_the_lengths(target, checkpoints):
    """`ContextCache.mask` is ``join(context_allowed(lengths), entries)`` without the boolean rows.

    Bugs: a row seeing another row's longer context, anchor positions kept from before an append or
    a finished row (the cache memoises them until the lengths change).
    """
    head, _ = load_head(checkpoints["dflash"], target)
    cache, seqs = observed_cache(target, head)
    entries = block_allowed("causal", 1, 3)
    lengths = [len(p) for p in PROMPTS]
    for _ in range(2):
        assert cache.anchor_positions().tolist() == lengths
        limits = torch.tensor(lengths)[:, None].expand(-1, 3)
        reference = join(context_allowed(limits, max(lengths)), entries, torch.float32)
        mask = cache.mask(entries, torch.float32)
        assert torch.equal(mask.allowed(), reference.allowed()) and mask.kv_len == reference.kv_len
        out = target.score(PROMPTS, taps=head.cfg.taps)
        cache.append([out.hidden[0, :2], out.hidden[1, :1]])  # rows grow unequally
        lengths = [lengths[0] + 2, lengths[1] + 1]
    cache.align(seqs[1:])
    assert cache.anchor_positions().tolist() == [lengths[1]]


@pytest.mark.parametrize("name", sorted(HEADS))
def test_save_load_round_trip_gives_identical_proposals(target, checkpoints, tmp_path, name):
    first = DRAFTERS.get(name).build(target, checkpoints[name])
    copy = save_head(first.head, tmp_path / "copy", name, TargetShape.of(target), {})
    second = DRAFTERS.get(name).build(target, copy)
    proposals = []
    for drafter in (first, second):
        _, seqs = observed_cache(target, drafter.head)
        out = target.score(PROMPTS, taps=drafter.taps)
        drafter.reset(seqs)
        drafter.observe(seqs, [out.hidden[i, : len(p)] for i, p in enumerate(PROMPTS)])
        proposals.append(drafter.propose(seqs, 24))
    assert proposals[0] == proposals[1]
    assert all(len(t) == 24 for t in proposals[0])


@pytest.mark.parametrize("name", sorted(HEADS))
@pytest.mark.parametrize("budget", [16, 64])
def test_untrained_heads_are_lossless(target, checkpoints, name, budget):
    stop = StopRule(24, frozenset())
    reference = generate(target, PROMPTS, stop)
    drafter = DRAFTERS.get(name).build(target, checkpoints[name])
    for prompts in (PROMPTS, PROMPTS[:1]):
        result = generate(target, prompts, stop, budget=budget, drafter=drafter)
        assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests[: len(prompts)]]
        assert sum(s.accepted for s in result.steps) > 0, "losslessness means nothing if every draft was rejected"


def _run_and_collect(target, drafter, monkeypatch, stop):
    """(generate's result, every drafted non-root token the drafter proposed in it)."""
    seen: list[int] = []
    propose = drafter.propose

    def spy(seqs, budget):
        trees = propose(seqs, budget)
        seen.extend(t for tree in trees for t in tree.tokens[1:])
        return trees

    monkeypatch.setattr(drafter, "propose", spy)
    return generate(target, PROMPTS, stop, budget=16, drafter=drafter), seen


@pytest.mark.parametrize("name", sorted(HEADS))
def test_draft_vocabulary_heads_propose_only_its_tokens_and_stay_lossless(target, tmp_path, monkeypatch, name):
    stop = StopRule(24, frozenset())
    reference = generate(target, PROMPTS, stop)
    outputs = torch.tensor([t for r in reference.requests for t in r.output_tokens])
    d2t = torch.bincount(outputs, minlength=VOCAB).argsort(descending=True, stable=True)[:5].sort().values
    heads = {}
    for label, cfg in (("full", HEADS[name]), ("reduced", dataclasses.replace(HEADS[name], draft_vocab=len(d2t)))):
        head = DraftHead(cfg, target.embed, target.lm_head)
        head.init_weights(0)
        if cfg.draft_vocab:
            head.d2t.copy_(d2t)
        heads[label] = save_head(head, tmp_path / label, name, TargetShape.of(target), {})
    _, strays = _run_and_collect(target, DRAFTERS.get(name).build(target, heads["full"]), monkeypatch, stop)
    assert not set(strays) <= set(d2t.tolist())  # the same head over the whole vocabulary proposes other tokens
    drafter = DRAFTERS.get(name).build(target, heads["reduced"])
    assert drafter.head.d2t.tolist() == d2t.tolist()  # saved with the weights
    result, proposed = _run_and_collect(target, drafter, monkeypatch, stop)
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests]
    assert sum(s.accepted for s in result.steps) > 0, "losslessness means nothing if every draft was rejected"
    assert proposed and set(proposed) <= set(d2t.tolist())


@pytest.mark.parametrize(("name", "options", "passes"), [
    ("dflash", {}, 1), ("jetflow", {"refine_passes": 0}, 1), ("jetflow", {"refine_passes": 2}, 3),
    ("eagle", {"depth": 5}, 5),
])
def test_draft_passes_and_entries_per_step(target, checkpoints, name, options, passes):
    drafter = DRAFTERS.get(name).build(target, checkpoints[name], **options)
    result = generate(target, PROMPTS, StopRule(10, frozenset()), budget=16, drafter=drafter)
    block = HEADS[name].block_size
    for s in result.steps:
        assert s.draft_passes == passes and s.draft_flops > 0
        if name == "dflash" or options.get("refine_passes") == 0:
            assert s.draft_entries == block  # one pass over [anchor, MASK x D]
        else:
            assert s.draft_entries > block


def test_head_for_another_target_is_a_one_line_error(target, tmp_path):
    deeper = TargetRunner.load(save_target(tmp_path / "deeper", layers=3), device="cpu")
    path = make_head(deeper, tmp_path / "head", "jetflow", head_config(taps=(0, 2)))
    with pytest.raises(JfbenchError) as err:
        DRAFTERS.get("jetflow").build(target, path)
    message = str(err.value)
    assert "\n" not in message and "3 layers" in message and "2 layers" in message and str(deeper.name) in message


def test_wrong_kind_of_head_and_missing_checkpoint_are_user_errors(target, checkpoints):
    with pytest.raises(JfbenchError, match="block head"):
        DRAFTERS.get("eagle").build(target, checkpoints["dflash"])
    with pytest.raises(JfbenchError, match="needs a trained head"):
        DRAFTERS.get("dflash").build(target, None)


@pytest.mark.parametrize(("flags", "mode"), [({}, "bidirectional"), ({"causal_head": True}, "causal")])
def test_released_dflash_and_jetspec_layout_loads(target, tmp_path, flags, mode):
    """A head written the way z-lab DFlash / JetSpec release them: no MASK tensor, target's mask token."""
    source = DraftHead(head_config(layers=2), target.embed, target.lm_head)
    source.init_weights(3)
    tensors = {f"model.{k}": v for k, v in source.state_dict().items() if k != "mask_embedding"}
    folder = tmp_path / "released"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "vocab_size": 64, "num_target_layers": 2, "block_size": 8,
        "dflash_config": {"target_layer_ids": [0, 1], "mask_token_id": 5, **flags},
    }
    (folder / "config.json").write_text(json.dumps(config))
    head, info = load_head(folder, target)
    assert info.source == "published" and head.cfg.mode == mode and head.cfg.block_size == 8
    torch.testing.assert_close(head.mask_embedding, target.embed.weight[5])
    torch.testing.assert_close(head.fc.weight, source.fc.weight)
    drafter = DRAFTERS.get("jetflow" if mode == "causal" else "dflash").build(target, folder)
    stop = StopRule(16, frozenset())
    result = generate(target, PROMPTS, stop, budget=16, drafter=drafter)
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in generate(target, PROMPTS, stop).requests]
    config["vocab_size"] = 99
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(JfbenchError, match="vocab 99"):
        load_head(folder, target)
