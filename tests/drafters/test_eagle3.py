"""EAGLE-3 heads in the public layout: synthetic files written key by key as SpecForge saves them and
vLLM's ``Eagle3LlamaForCausalLM.load_weights`` reads them (``midlayer.*`` renamed to ``layers.0.*``,
``d2t`` -> ``draft_id_to_target_id``, ``t2d`` skipped, ``embed_tokens`` optional)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from drafters import DRAFTERS
from drafters.eagle.eagle3 import export_eagle3, load_eagle3
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.rope import Rotary, rotate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from tests.helpers.eagle3_heads import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEADS,
    observe_prompts,
    write_specforge_head,
)
from tests.helpers.heads import PROMPTS
from tests.helpers.random_models import VOCAB, random_model, word_tokenizer


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> TargetRunner:
    path = tmp_path_factory.mktemp("target3")
    random_model("qwen3", layers=3).save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    return TargetRunner.load(path, device="cpu")


def reference_chain(folder: Path, target: TargetRunner, prompt: list[int], root: int, depth: int) -> list[int]:
    """EAGLE-3 greedy drafting recomputed from the weights with nothing cached: entry p pairs token
    p + 1 with fc(aux states at p) at position p; every step re-runs the layer over all entries
    (causal attention) and appends [drafted token ; the last entry's pre-norm output]."""
    w = {k: v.double() if v.is_floating_point() else v for k, v in load_file(str(folder / "model.safetensors")).items()}
    cfg = json.loads((folder / "config.json").read_text())
    taps = [a - 1 for a in sorted(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])]
    aux = target.score([prompt], taps=taps).hidden[0].double()  # (T, 3, H)
    embed = target.embed.weight.double()
    target_ids = torch.arange(cfg["draft_vocab_size"]) + w["d2t"]

    def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"]) * weight

    tokens = [*prompt[1:], root]  # token p + 1 of each entry
    features = list(aux.flatten(-2) @ w["fc.weight"].T)  # fc(aux at p), (H,) each
    rotary = Rotary(HEAD_DIM, cfg["rope_theta"])
    drafted: list[int] = []
    for _ in range(depth):
        n = len(tokens)
        e = rms(embed[torch.tensor(tokens)], w["midlayer.input_layernorm.weight"])
        f = torch.stack(features)
        x = torch.cat([e, rms(f, w["midlayer.hidden_norm.weight"])], -1)  # (n, 2H)
        cos, sin = rotary(torch.arange(n)[None], torch.float64)
        q = rotate((x @ w["midlayer.self_attn.q_proj.weight"].T).view(1, n, HEADS, HEAD_DIM).transpose(1, 2), cos, sin)
        k = rotate((x @ w["midlayer.self_attn.k_proj.weight"].T).view(1, n, KV_HEADS, HEAD_DIM).transpose(1, 2), cos, sin)
        v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(1, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
        k, v = k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(HEAD_DIM))
        h = f + o.transpose(1, 2).reshape(n, -1) @ w["midlayer.self_attn.o_proj.weight"].T
        m = rms(h, w["midlayer.post_attention_layernorm.weight"])
        h = h + (F.silu(m @ w["midlayer.mlp.gate_proj.weight"].T) * (m @ w["midlayer.mlp.up_proj.weight"].T)) @ w["midlayer.mlp.down_proj.weight"].T
        logits = rms(h[-1], w["norm.weight"]) @ w["lm_head.weight"].T
        drafted.append(int(target_ids[logits.argmax()]))
        tokens.append(drafted[-1])
        features.append(h[-1])
    return drafted


@pytest.mark.parametrize("draft_vocab", [VOCAB, 40])
def test_chain_matches_eagle3_recomputed_from_the_weights(target, tmp_path, draft_vocab):
    """Pairing (token p + 1, feature p), the positions, the residual and the fed-back pre-norm
    feature all have to be right for the cached drafter to equal the from-scratch reference."""
    folder = write_specforge_head(tmp_path / "head", draft_vocab=draft_vocab)
    drafter = DRAFTERS.get("eagle").build(target, folder, fanout=1, depth=5)
    trees = drafter.propose(observe_prompts(drafter, target), 6)
    for prompt, tree in zip(PROMPTS, trees, strict=True):
        assert tree.tokens[1:] == reference_chain(folder, target, prompt, 1, 5)
        assert tree.parents == [-1, 0, 1, 2, 3, 4]  # fanout 1 drafts a chain


def test_head_loads_with_its_own_embedding_and_maps_draft_ids(target, tmp_path):
    folder = write_specforge_head(tmp_path / "head", draft_vocab=40, embed=torch.randn(VOCAB, HIDDEN))
    head, info = load_eagle3(folder, target)
    assert head.own_embedding and info.drafter == "eagle3" and head.cfg.taps == (-1, 0, 1)
    logits = head.logits(torch.randn(3, HIDDEN))
    allowed = torch.zeros(VOCAB, dtype=torch.bool)
    allowed[head.target_ids()] = True
    assert torch.isinf(logits[:, ~allowed]).all() and torch.isfinite(logits[:, allowed]).all()


@pytest.mark.parametrize("budget", [4, 16])
@pytest.mark.parametrize("name", ["eagle", "eagle3"])  # both read either layout
def test_published_eagle3_head_is_lossless(target, tmp_path, budget, name):
    drafter = DRAFTERS.get(name).build(target, write_specforge_head(tmp_path / "head"))
    stop = StopRule(24, frozenset())
    reference = generate(target, PROMPTS, stop)
    result = generate(target, PROMPTS, stop, budget=budget, drafter=drafter)
    assert [r.output_tokens for r in result.requests] == [r.output_tokens for r in reference.requests]
    assert sum(s.accepted for s in result.steps) > 0, "losslessness means nothing if every draft was rejected"


def test_export_then_read_back_gives_identical_drafts(target, tmp_path):
    source = write_specforge_head(tmp_path / "specforge", draft_vocab=40, aux=(2, 0, 1))
    first = DRAFTERS.get("eagle").build(target, source)
    copy = export_eagle3(source, tmp_path / "vllm")
    second = DRAFTERS.get("eagle").build(target, copy)
    proposals = [d.propose(observe_prompts(d, target), 12) for d in (first, second)]
    assert proposals[0] == proposals[1] and all(isinstance(t, DraftTree) and len(t) == 12 for t in proposals[0])
    config = json.loads((copy / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 40


@pytest.mark.parametrize(("change", "named"), [
    ({"config": {"vocab_size": 99}}, "vocab_size 99"),
    ({"config": {"target_hidden_size": 32}}, "target hidden size 32"),
    ({"aux": (1, 2, 4)}, "aux layers [1, 2, 4]"),
    ({"aux": (0, 1, 1)}, "aux layers [0, 1, 1]"),
    ({"config": {"num_hidden_layers": 2}}, "2 draft layers"),
    ({"config": {"draft_vocab_size": 50}}, "d2t has shape (40,)"),
])
def test_heads_that_do_not_fit_the_target_are_one_line_errors(target, tmp_path, change, named):
    folder = write_specforge_head(tmp_path / "head", draft_vocab=40, aux=change.get("aux", (0, 1, 2)), **change.get("config", {}))
    with pytest.raises(JfbenchError) as err:
        load_eagle3(folder, target)
    assert named in str(err.value) and "\n" not in str(err.value)
