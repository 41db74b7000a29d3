"""A drafter family from outside the package, in this one file: it trains and drafts unchanged.

`NextTokenDrafter` is a one-step head (Medusa-1 style): from the context it guesses the token
after the root, and proposes that chain of two. Its training objective lays out blocks
``[x_p, MASK]`` that predict x_{p+1}, with a one-layer head. It is registered with a registry
call in the test, then `jfbench train --drafter next-token` and `jfbench sweep` run it on the
micro target like any built-in drafter.

Bugs this catches: the training package branching on drafter names again (the train command
would refuse or train another family's objective: the recorded layout, the head depth and the
trained weights say which); the sweep failing to build or verify a plug-in's drafts (lossless
with accepted drafts, against the AR baseline of the same run).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
import torch

from drafters import DRAFTERS
from drafters.learned import LearnedDrafter
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.heads.masks import block_allowed, context_allowed, join
from jetflow_bench.training.objective import TrainingObjective
from tests.helpers.data_dirs import benchmark_data_dir

NAME = "next-token"
DATA = benchmark_data_dir()  # the made-up folder where no data folder is given
RECIPE = ["--steps", "40", "--prompts", "96", "--max-new-tokens", "96", "--seq-len", "160", "--batch-size", "4",
          "--anchors", "8"]  # the quick heads' data (cached regen), so only the head trains here


def one_step_blocks(head, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks [x_p, MASK] laid end to end: tokens (B, 2A) -> entry inputs (B, 2A, H), is-MASK (B, 2A)."""
    b, e = tokens.shape
    is_mask = torch.tensor([False, True], device=tokens.device).repeat(e // 2).expand(b, -1)
    return head.block_inputs(tokens, is_mask), is_mask


class NextTokenTraining(TrainingObjective):
    """At ``anchors`` random positions p per sequence, the block [x_p, MASK] sees the context < p;
    the MASK predicts x_{p+1} against the target's distribution at p (every position weighs the same)."""

    def head_layers(self, target_layers: int) -> int:
        return 1

    def loss(self, head, batch, config, generator):
        b, t = batch.tokens.shape
        anchors = batch.random_positions(config.anchors, 1, generator)  # (B, A)
        pos = (anchors[..., None] + torch.arange(2, device=anchors.device)).flatten(1)  # (B, 2A)
        x, is_mask = one_step_blocks(head, batch.tokens.gather(1, pos.clamp(max=t - 1)))
        inner = block_allowed(head.cfg.mode, anchors.shape[1], 2, anchors.device)  # (2A, 2A)
        mask = join(context_allowed(anchors.repeat_interleave(2, dim=1), t), inner, x.dtype)
        _, store = batch.context(head)
        hidden = head(x, pos, mask, store)  # (B, 2A, H)
        rows, entries = (is_mask & (pos < batch.lengths[:, None])).nonzero(as_tuple=True)
        return batch.distill(head, hidden[rows, entries], rows, pos[rows, entries] - 1, torch.ones(len(rows)), config.loss)


class NextTokenDrafter(LearnedDrafter):
    """Proposes root -> the head's top-1 guess of the next token (one head forward per step)."""

    name = NAME
    training = NextTokenTraining()

    @torch.inference_mode()
    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        cache = self.require_cache(seqs)
        device = cache.last_feature.device
        roots = torch.tensor([[s.tokens[-1], 0] for s in seqs], device=device)  # (B, 2); the MASK's token is unused
        x, _ = one_step_blocks(self.head, roots)
        positions = cache.anchor_positions()[:, None] + torch.arange(2, device=device)  # (B, 2)
        mask = cache.mask(block_allowed(self.head.cfg.mode, 1, 2, device), x.dtype)
        hidden = self.head(x, positions, mask, cache.scratch(0, 2))  # (B, 2, H)
        guesses = self.head.logits(hidden[:, 1]).argmax(-1).tolist()  # (B,)
        return [DraftTree.chain([s.tokens[-1], g][:budget]) for s, g in zip(seqs, guesses, strict=True)]


@pytest.fixture
def plugin(monkeypatch):
    """The family registered as a third party would, for this test only."""
    monkeypatch.setattr(DRAFTERS, "_entries", dict(DRAFTERS._entries))  # restored after the test
    DRAFTERS.register(NAME, NextTokenDrafter)
    return NAME


@pytest.mark.slow
def test_an_outside_drafter_trains_and_drafts_losslessly(plugin, micro_target, cli, tmp_path):
    common = ["--target", str(micro_target), "--data-dir", str(DATA), "--device", "cpu"]
    code, out, err = cli("train", "--drafter", plugin, "--out", str(tmp_path / "head"), *RECIPE, *common)
    assert code == 0, err
    head = Path(out.strip().splitlines()[-2])
    saved = json.loads((head / "config.json").read_text())
    assert saved["drafter"] == NAME and saved["num_hidden_layers"] == 1  # its own objective chose the depth
    assert saved["training"]["block_layout"] is None  # no block-family setting leaked into its recipe
    losses = saved["training"]["losses"]
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])

    code, _, err = cli("sweep", "--drafters", f"{plugin}={head}", "--suites", "gsm8k", "--budgets", "1,2,8",
                       "--limit", "2", "--max-new-tokens", "32", "--repeats", "1", "--out", str(tmp_path / "run"),
                       "--no-progress", "--strict", *common)
    assert code == 0, err
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    steps = pd.read_parquet(tmp_path / "run" / "steps.parquet")
    arm = requests[requests["drafter"] == NAME]
    assert len(arm) == 6 and arm["lossless"].all()
    drafted = steps[steps["drafter"] == NAME]
    assert drafted.groupby("budget")["drafted"].max().to_dict() == {1: 0, 2: 1, 8: 1}
    assert drafted["accepted"].sum() > 0, "a trained head should get some drafts accepted"


def test_a_drafter_without_an_objective_is_refused_in_one_line(cli, tmp_path):
    code, _, err = cli("train", "--drafter", "ngram", "--target", str(tmp_path), "--out", str(tmp_path / "h"))
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: --drafter 'ngram' declares no training objective")
    assert "eagle" in err and "ngram" not in err.split("train one of")[1]
