"""Every choice that determines a trained draft head, in one frozen record.

The record (minus run-only fields) is hashed into cache keys and written into the checkpoint's
config.json, so a head always says how it was made and a changed default trains a new head.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from jetflow_bench.errors import JfbenchError

DRAFTERS = ("eagle", "dflash", "jetflow")
HEADS = {"causal": "causal", "diffusion": "bidirectional"}  # CLI name -> in-block attention mode
LOSSES = ("fkl", "rkl", "sft")
DATA = ("regen", "raw")
SOURCES = ("gsm8k", "mbpp", "sharegpt")
LAYOUTS = ("prefix", "packed")  # jetflow training blocks (see training/train_block.py)
DEFAULT_HEAD = {"eagle": "causal", "dflash": "diffusion", "jetflow": "causal"}
# Bump when the training code changes in a way that alters the weights, so cached heads retrain.
# 2: taps never include a shallow target's final layer (drafters.checkpoint.default_taps).
RECIPE_VERSION = 2


BLOCK_HEAD_DEPTH_RATIO = 7  # the paper drafts for a 36-layer target with a 5-layer head: ~1/7 of its depth


def default_head_layers(drafter: str, target_layers: int) -> int:
    """Draft layers of a new head: block heads ~1/7 of the target's depth (at least 2, which the
    shallow toy targets get: micro 2 of 3, tiny 2 of 6, deep 2 of 14; Qwen3-8B's 36 layers give 5);
    EAGLE one layer whatever the depth, as EAGLE-1/2/3 are built."""
    if drafter == "eagle":
        return 1
    return max(2, round(target_layers / BLOCK_HEAD_DEPTH_RATIO))


@dataclass(frozen=True)
class TrainConfig:
    """A draft-head training run (defaults sized for the toy targets on a 2-core CPU)."""

    drafter: str  # eagle | dflash | jetflow
    head: str | None = None  # causal | diffusion; None = the drafter's own (dflash: diffusion, else causal)
    loss: str = "fkl"  # fkl (forward KL, default) | rkl (reverse KL) | sft (CE on the target's argmax)
    data: str = "regen"  # regen (the target's own continuations) | raw (the corpus' reference text)
    corpus: tuple[str, ...] = SOURCES  # training prompt sources (training splits only)
    prompts: int = 512  # training prompts (regen) / documents (raw) drawn from the sources
    max_new_tokens: int = 256  # length of each regenerated continuation
    steps: int = 300  # optimiser steps
    batch_size: int = 8  # sequences per step
    seq_len: int = 256  # tokens per sequence (longer ones are cut)
    lr: float = 2e-3  # AdamW peak, linear warm-up then cosine decay to lr / 10
    warmup: int = 20  # warm-up steps
    grad_clip: float = 1.0
    layers: int | None = None  # draft layers; None = `default_head_layers` for the target's depth
    num_taps: int = 3  # K target layers fused (see drafters.checkpoint.default_taps)
    block_size: int = 16  # anchor + D drafted positions (block heads)
    anchors: int = 16  # blocks per sequence per step (block heads)
    # Training-time-test steps (eagle): the head's own features fed back this many times. None = the
    # depth it drafts, block_size - 1, as EAGLE-3 trains every step it will draft (its released
    # recipe unrolls 7). Head compute per optimiser step grows linearly with it.
    ttt_steps: int | None = None
    decay: float = 7.0  # loss weight exp(-(k-1)/decay) at drafted depth k; 0 = uniform
    prefix_zero: float = 0.5  # jetflow: share of blocks trained all-masks (pass 1); the rest keep a real prefix
    layout: str | None = None  # jetflow blocks: prefix | packed; None = packed for a causal head, else prefix
    seed: int = 0

    def __post_init__(self) -> None:
        choices = {"drafter": (self.drafter, DRAFTERS), "loss": (self.loss, LOSSES), "data": (self.data, DATA)}
        for option, (value, allowed) in choices.items():
            if value not in allowed:
                raise JfbenchError(f"--{option} {value!r} is unknown: choose one of {', '.join(allowed)}")
        if self.head is not None and self.head not in HEADS:
            raise JfbenchError(f"--head {self.head!r} is unknown: choose one of {', '.join(HEADS)}")
        if self.drafter == "eagle" and self.resolved_head != "causal":
            raise JfbenchError("--head diffusion applies to block drafters (dflash, jetflow), not eagle")
        if self.layout is not None and self.layout not in LAYOUTS:
            raise JfbenchError(f"--layout {self.layout!r} is unknown: choose one of {', '.join(LAYOUTS)}")
        if self.layout == "packed" and (self.drafter != "jetflow" or self.mode != "causal"):
            raise JfbenchError("--layout packed needs --drafter jetflow with a causal head (a bidirectional "
                               "block would let each query see the token it predicts)")
        unknown = [s for s in self.corpus if s not in SOURCES]
        if unknown or not self.corpus:
            raise JfbenchError(f"--corpus {','.join(self.corpus)!r}: choose from {', '.join(SOURCES)}")
        if self.ttt_steps is not None and self.ttt_steps < 1:
            raise JfbenchError(f"--ttt-steps {self.ttt_steps} must be at least 1")
        if self.block_size < 2 or self.steps < 1 or self.batch_size < 1 or self.prompts < 1:
            raise JfbenchError("--block-size must be >= 2 and --steps, --batch-size, --prompts >= 1")
        if self.seq_len < self.block_size + 2:
            raise JfbenchError(f"--seq-len {self.seq_len} must exceed the block size ({self.block_size}) + 1")

    @property
    def resolved_head(self) -> str:
        return self.head or DEFAULT_HEAD[self.drafter]

    @property
    def resolved_layout(self) -> str | None:
        """Training-block layout of a block head; None for eagle, which trains no blocks."""
        if self.drafter == "eagle":
            return None
        if self.layout:
            return self.layout
        return "packed" if self.drafter == "jetflow" and self.mode == "causal" else "prefix"

    @property
    def resolved_ttt_steps(self) -> int | None:
        """EAGLE's training-time-test steps: the drafted depth unless set; None for block heads."""
        if self.drafter != "eagle":
            return None
        return self.ttt_steps or self.block_size - 1

    @property
    def mode(self) -> str:
        """In-block attention of the trained head."""
        return HEADS[self.resolved_head]

    def num_layers(self, target_layers: int) -> int:
        return self.layers or default_head_layers(self.drafter, target_layers)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "corpus": list(self.corpus), "head": self.resolved_head,
                "ttt_steps": self.resolved_ttt_steps}

    def key(self, target_fingerprint: str) -> str:
        """Short hash of this config on this target (cache folder names)."""
        blob = json.dumps({"config": self.to_dict(), "target": target_fingerprint, "version": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]
