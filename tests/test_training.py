"""Draft-head training: config validation, losses, data, resume, caching and the CLI.

Fast tests use a random 2-layer target and a few steps; the learning test uses the micro toy target.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from drafters.block_training import DFLASH_TRAINING, JETFLOW_TRAINING
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.errors import JfbenchError
from jetflow_bench.training import TrainConfig, ensure_head, head_path, train_drafter
from jetflow_bench.training import data as training_data
from jetflow_bench.training.losses import depth_weights, distill_loss
from tests.conftest import shared_data_dir
from tests.learned_heads import learned_heads  # noqa: F401 - session fixture
from tests.random_models import save_random_model

DATA = shared_data_dir()
needs_data = pytest.mark.skipif(DATA is None, reason="needs the shared data folder (JFBENCH_DATA_DIR)")
TINY_RUN = {
    "prompts": 8, "max_new_tokens": 24, "seq_len": 48, "batch_size": 2, "anchors": 3, "block_size": 6, "warmup": 1,
}


@pytest.fixture(scope="module")
def random_target(tmp_path_factory) -> Path:
    return save_random_model(tmp_path_factory.mktemp("target") / "qwen3")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "jfbench-cache"))


def test_config_validation_names_the_option():
    with pytest.raises(JfbenchError, match="--loss 'kl'"):
        TrainConfig(drafter="jetflow", loss="kl")
    with pytest.raises(JfbenchError, match="--head bidirectional: eagle trains causal heads only"):
        TrainConfig(drafter="eagle", head="bidirectional")
    with pytest.raises(JfbenchError, match="--corpus"):
        TrainConfig(drafter="dflash", corpus=("wikipedia",))
    assert TrainConfig(drafter="dflash").mode == "bidirectional"
    diffusion = TrainConfig(drafter="jetflow", head="diffusion")  # DFlash's name, accepted on input
    assert diffusion == TrainConfig(drafter="jetflow", head="bidirectional") and diffusion.mode == "bidirectional"
    assert TrainConfig(drafter="jetflow").mode == "causal"


def test_losses_vanish_when_draft_equals_target_and_order_as_expected():
    torch.manual_seed(0)
    target = torch.randn(5, 11)
    ones = torch.ones(5)
    for kind in ("fkl", "rkl"):
        loss, agree = distill_loss(target.clone(), target, ones, kind)
        assert loss.item() == pytest.approx(0.0, abs=1e-6) and agree.item() == 1.0
    sft, _ = distill_loss(target.clone(), target, ones, "sft")
    assert sft.item() > 0  # cross-entropy keeps the target's own entropy
    far, _ = distill_loss(torch.zeros(5, 11), target, ones, "fkl")
    assert far.item() > 0.1
    assert depth_weights(torch.tensor([1, 2, 8]), 7.0).tolist() == pytest.approx([1.0, math.exp(-1 / 7), math.exp(-1)])
    assert depth_weights(torch.tensor([1, 5]), 0.0).tolist() == [1.0, 1.0]


def test_jetflow_blocks_mix_all_mask_and_real_prefix():
    gen = torch.Generator().manual_seed(0)
    k = JETFLOW_TRAINING.prefix_lengths(TrainConfig(drafter="jetflow"), (64, 16), gen)
    assert k.min() == 0 and k.max() <= 14
    assert 0.35 < (k == 0).float().mean() < 0.65
    assert DFLASH_TRAINING.prefix_lengths(TrainConfig(drafter="dflash"), (4, 4), gen).eq(0).all()


@pytest.mark.parametrize(("drafter", "head", "layout"), [
    ("jetflow", None, "packed"), ("jetflow", None, "prefix"), ("jetflow", "bidirectional", "prefix"), ("dflash", None, "prefix"),
])
def test_no_training_query_sees_the_token_it_predicts(drafter, head, layout):
    """A MASK at offset o predicts x_{p+o}: no entry it attends to may hold a real token at offset >= o."""
    config = TrainConfig(drafter=drafter, head=head, layout=layout if drafter == "jetflow" else None, block_size=6)
    groups = config.objective.block_groups(config, config.mode, 2, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert sum(g.count for g in groups) == config.anchors
    for g in groups:
        for mask_row, depth_row in zip(g.is_mask.flatten(0, 1), g.depth.flatten(0, 1), strict=True):
            for j in mask_row.nonzero().flatten().tolist():
                seen = g.allowed[j].clone()
                seen[j] = False
                assert not (seen & ~mask_row & (g.offsets >= g.offsets[j])).any()
                assert depth_row[j] >= 1
    if layout == "packed":  # a prefix_zero share of all-mask blocks for pass 1, the rest packed
        assert [g.count for g in groups] == [8, 8] and groups[1].is_mask.sum(-1).eq(5).all()


def test_packed_layout_needs_a_causal_jetflow_head():
    assert TrainConfig(drafter="jetflow").resolved_layout == "packed"
    assert TrainConfig(drafter="jetflow", head="bidirectional").resolved_layout == "prefix"
    for bad in ({"drafter": "jetflow", "head": "bidirectional"}, {"drafter": "dflash"}):
        with pytest.raises(JfbenchError, match="--layout packed needs"):
            TrainConfig(**bad, layout="packed")
    with pytest.raises(JfbenchError, match="--layout 'tree'"):
        TrainConfig(drafter="jetflow", layout="tree")


@needs_data
def test_training_prompts_are_training_splits_in_suite_format(random_target):
    tokenizer = TargetRunner.load(random_target, device="cpu").tokenizer
    pairs = training_data.training_pairs(("gsm8k", "mbpp"), 6, 0, tokenizer, DATA)
    assert [p.source for p in pairs] == ["gsm8k", "mbpp"] * 3
    assert all(p.prompt.startswith("Question: ") and p.prompt.endswith("\nAnswer:") for p in pairs[::2])
    mbpp_test_text = json.loads((DATA / "mbpp/mbpp.jsonl").read_text().splitlines()[10])["text"]  # task 11
    assert all(mbpp_test_text not in p.prompt for p in pairs)


@needs_data
def test_regen_data_is_cached_on_disk(random_target, monkeypatch):
    target = TargetRunner.load(random_target, device="cpu")
    config = TrainConfig(drafter="dflash", **TINY_RUN)
    first = training_data.training_sequences(target, config, DATA, show_progress=False)
    monkeypatch.setattr(training_data, "generate", lambda *a, **k: pytest.fail("regen ran twice"))
    assert training_data.training_sequences(target, config, DATA, show_progress=False) == first
    raw = training_data.training_sequences(target, TrainConfig(drafter="dflash", data="raw", **TINY_RUN), DATA)
    assert all(seq[-1] in target.eos_token_ids for seq in raw)


@needs_data
def test_interrupted_run_resumes_to_the_same_head(random_target, tmp_path):
    options = {"drafter": "jetflow", "steps": 4, **TINY_RUN}
    whole = train_drafter(random_target, tmp_path / "whole", data_dir=DATA, show_progress=False, **options)
    part = train_drafter(random_target, tmp_path / "part", data_dir=DATA, show_progress=False, time_limit_s=0, **options)
    assert json.loads((part / "config.json").read_text())["training"]["steps_done"] == 1
    assert (part / ".partial" / "state.pt").is_file()
    train_drafter(random_target, tmp_path / "part", data_dir=DATA, show_progress=False, **options)
    assert not (part / ".partial").exists()
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(part / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    with pytest.raises(JfbenchError, match="other settings"):
        train_drafter(random_target, whole, data_dir=DATA, show_progress=False, **{**options, "steps": 5})


@needs_data
def test_ensure_head_trains_once_per_recipe(random_target):
    options = {"steps": 2, **TINY_RUN}
    first = ensure_head(random_target, "eagle", data_dir=DATA, show_progress=False, **options)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = ensure_head(random_target, "eagle", data_dir=DATA, show_progress=False, **options)
    assert again == first and (again / "model.safetensors").stat().st_mtime_ns == stamp
    other = head_path(random_target, TrainConfig(drafter="eagle", loss="rkl", **options))
    assert other != first


@needs_data
def test_cli_train_prints_folder_and_summary(random_target, tmp_path):
    from jetflow_bench.cli import _register_commands, app

    _register_commands()
    out = tmp_path / "head"
    args = ["train", "--drafter", "dflash", "--target", str(random_target), "--out", str(out), "--steps", "2",
            "--prompts", "8", "--max-new-tokens", "24", "--seq-len", "48", "--batch-size", "2", "--anchors", "2",
            "--block-size", "6", "--data-dir", str(DATA), "--device", "cpu"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == str(out)
    assert json.loads(lines[-1])["steps_done"] == 2
    bad = CliRunner().invoke(app, [*args[:-2], "--loss", "kl"])
    assert bad.exit_code != 0 and isinstance(bad.exception, JfbenchError)
    seeded = CliRunner().invoke(app, [*args, "--seeds", "1,2"])
    assert seeded.exit_code == 0, seeded.output
    lines = seeded.stdout.strip().splitlines()
    assert [line for line in lines if line.startswith("/")] == [str(out / "seed-1"), str(out / "seed-2")]
    assert [json.loads(line)["seed"] for line in lines if line.startswith("{")] == [1, 2]
    weights = [load_file(str(out / f"seed-{s}" / "model.safetensors"))["fc.weight"] for s in (1, 2)]
    assert not torch.equal(*weights)  # the seed reached initialisation


@pytest.mark.slow
def test_short_training_lowers_the_loss(learned_heads):  # noqa: F811
    for path in learned_heads.values():
        losses = json.loads((path / "config.json").read_text())["training"]["losses"]
        assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, path
