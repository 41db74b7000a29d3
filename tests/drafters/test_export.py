"""`jfbench export`: jfbench block heads written as the folder vLLM's ``dflash`` method loads
(``DFlashQwen3ForCausalLM``: released config keys, weights without jfbench's MASK tensor, the trained
MASK vector in ``mask_embedding.pt``), then read back by jfbench with identical drafts."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from drafters import DRAFTERS
from jetflow_bench.heads.checkpoint import TargetShape, save_head
from jetflow_bench.heads.head import DraftHead
from tests.helpers.eagle3_heads import observe_prompts
from tests.helpers.heads import PROMPTS, head_config


def trained_like_head(target, path, drafter: str, mode: str):  # noqa: F811
    """A head whose MASK vector is not the mask token's embedding, as training leaves it."""
    head = DraftHead(head_config(mode, layers=2), target.embed, target.lm_head)
    head.init_weights(7)
    with torch.no_grad():
        head.mask_embedding.add_(torch.randn_like(head.mask_embedding))
    return save_head(head, path, drafter, TargetShape.of(target), {"note": "random"})


@pytest.mark.parametrize(("drafter", "mode"), [("dflash", "bidirectional"), ("jetflow", "causal")])
def test_dflash_export_reads_back_with_identical_drafts(target, tmp_path, cli, drafter, mode):  # noqa: F811
    source = trained_like_head(target, tmp_path / "head", drafter, mode)
    code, out, err = cli("export", str(source), "--format", "dflash", "--out", str(tmp_path / "served"))
    assert code == 0, err
    served = tmp_path / "served"
    assert out.strip() == str(served)
    config = json.loads((served / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["is_causal"] == (mode == "causal")
    assert config["dflash_config"]["target_layer_ids"] == [0, 1] and config["block_size"] == 8
    assert "mask_embedding" not in load_file(str(served / "model.safetensors"))  # vLLM takes it from the .pt file
    first = DRAFTERS.get(drafter).build(target, source)
    second = DRAFTERS.get(drafter).build(target, served)
    assert second.info.source == "published" and second.head.cfg.mode == mode
    torch.testing.assert_close(second.head.mask_embedding, first.head.mask_embedding)
    proposals = [d.propose(observe_prompts(d, target, PROMPTS), 8) for d in (first, second)]
    assert proposals[0] == proposals[1]


def test_a_head_with_a_reduced_draft_vocabulary_exports_without_it_and_says_so(target, tmp_path, cli):  # noqa: F811
    # Bug caught: the d2t buffer written into vLLM's folder, which vLLM's dflash loader refuses
    # ("no parameter named 'draft_id_to_target_id'") only when the server starts.
    from dataclasses import replace

    head = DraftHead(replace(head_config("causal", layers=1), draft_vocab=16), target.embed, target.lm_head)
    head.init_weights(3)
    source = save_head(head, tmp_path / "head", "jetflow", TargetShape.of(target), {"note": "random"})
    code, _, err = cli("export", str(source), "--format", "dflash", "--out", str(tmp_path / "served"))
    assert code == 0, err
    assert "d2t" not in load_file(str(tmp_path / "served" / "model.safetensors"))
    assert "drafts over 16 tokens" in " ".join(err.split()) and "whole vocabulary" in err


def test_export_refuses_what_the_format_cannot_hold(target, tmp_path, cli):  # noqa: F811
    eagle = DraftHead(head_config(eagle=True), target.embed, target.lm_head)
    eagle.init_weights(0)
    path = save_head(eagle, tmp_path / "eagle", "eagle", TargetShape.of(target), {})
    for fmt, named in (("dflash", "is an EAGLE head"), ("eagle3", "is not an EAGLE-3 head"), ("medusa", "unknown export format")):
        code, out, err = cli("export", str(path), "--format", fmt, "--out", str(tmp_path / fmt))
        assert code == 2 and out == "" and named in err and len(err.strip().splitlines()) == 1, err
    code, _, err = cli("export", str(tmp_path / "nothing"), "--format", "dflash", "--out", str(tmp_path / "x"))
    assert code == 2 and "no config.json" in err
