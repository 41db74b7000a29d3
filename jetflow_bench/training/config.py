"""Every choice that determines a trained draft head, in one frozen record.

The record (minus run-only fields) is hashed into cache keys and written into the checkpoint's
config.json, so a head always says how it was made and a changed default trains a new head.
Which fields a drafter family reads, their family defaults and its own checks come from the
family's `TrainingObjective` (declared on the drafter class, see `training.objective`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jetflow_bench.errors import JfbenchError

if TYPE_CHECKING:
    from jetflow_bench.training.objective import TrainingObjective

HEADS = {"causal": "causal", "diffusion": "bidirectional"}  # CLI name -> in-block attention mode
LOSSES = ("fkl", "rkl", "sft")
DATA = ("regen", "raw")
SOURCES = ("gsm8k", "mbpp", "sharegpt")
# Bump when the training code changes in a way that alters the weights, so cached heads retrain.
# 2: taps never include a shallow target's final layer (drafters.checkpoint.default_taps).
RECIPE_VERSION = 2


def default_head_layers(drafter: str, target_layers: int) -> int:
    """Draft layers of a new ``drafter`` head for a target of ``target_layers`` (its objective's `head_layers`)."""
    from jetflow_bench.training.objective import objective_for

    return objective_for(drafter)[1].head_layers(target_layers)


@dataclass(frozen=True)
class TrainConfig:
    """A draft-head training run (defaults sized for the toy targets on a 2-core CPU)."""

    drafter: str  # a registered drafter family with a training objective (built in: eagle, dflash, jetflow)
    head: str | None = None  # causal | diffusion; None = the family's own (dflash: diffusion, else causal)
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
    layers: int | None = None  # draft layers; None = the family's `head_layers` for the target's depth
    num_taps: int = 3  # K target layers fused (see drafters.checkpoint.default_taps)
    block_size: int = 16  # anchor + D drafted positions (block heads)
    anchors: int = 16  # blocks per sequence per step (block heads)
    ttt_steps: int | None = None  # eagle: training-time-test steps; None = its drafted depth (drafters/eagle_training.py)
    decay: float = 7.0  # loss weight exp(-(k-1)/decay) at drafted depth k; 0 = uniform
    prefix_zero: float = 0.5  # jetflow: share of blocks trained all-masks (pass 1); the rest keep a real prefix
    layout: str | None = None  # block heads: prefix | packed; None = packed for a causal jetflow head, else prefix
    seed: int = 0

    def __post_init__(self) -> None:
        from jetflow_bench.training.objective import objective_for

        family, _ = objective_for(self.drafter)  # unknown or untrainable drafters: one-line error
        object.__setattr__(self, "drafter", family)  # aliases, and arms reading another family's heads
        choices = {"loss": (self.loss, LOSSES), "data": (self.data, DATA)}
        for option, (value, allowed) in choices.items():
            if value not in allowed:
                raise JfbenchError(f"--{option} {value!r} is unknown: choose one of {', '.join(allowed)}")
        if self.head is not None and self.head not in HEADS:
            raise JfbenchError(f"--head {self.head!r} is unknown: choose one of {', '.join(HEADS)}")
        if self.mode not in self.objective.head_modes:
            trainable = [name for name, mode in HEADS.items() if mode in self.objective.head_modes]
            raise JfbenchError(f"--head {self.head}: {self.drafter} trains {' or '.join(trainable)} heads only")
        unknown = [s for s in self.corpus if s not in SOURCES]
        if unknown or not self.corpus:
            raise JfbenchError(f"--corpus {','.join(self.corpus)!r}: choose from {', '.join(SOURCES)}")
        if self.block_size < 2 or self.steps < 1 or self.batch_size < 1 or self.prompts < 1:
            raise JfbenchError("--block-size must be >= 2 and --steps, --batch-size, --prompts >= 1")
        if self.seq_len < self.block_size + 2:
            raise JfbenchError(f"--seq-len {self.seq_len} must exceed the block size ({self.block_size}) + 1")
        self.objective.validate(self)

    @property
    def objective(self) -> TrainingObjective:
        """The family's training objective (declared on its drafter class)."""
        from jetflow_bench.training.objective import objective_for

        return objective_for(self.drafter)[1]

    @property
    def resolved_head(self) -> str:
        """The ``--head`` name of the head trained: the recipe's, else the family's default."""
        if self.head:
            return self.head
        return next(name for name, mode in HEADS.items() if mode == self.objective.default_head)

    @property
    def resolved_layout(self) -> str | None:
        """Training-block layout the family uses (None: it trains no blocks)."""
        return self.objective.settings(self).get("layout")

    @property
    def resolved_ttt_steps(self) -> int | None:
        """Training-time-test steps the family runs (None: it runs none)."""
        return self.objective.settings(self).get("ttt_steps")

    @property
    def mode(self) -> str:
        """In-block attention of the trained head."""
        return HEADS[self.resolved_head]

    def num_layers(self, target_layers: int) -> int:
        return self.layers or self.objective.head_layers(target_layers)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "corpus": list(self.corpus), "head": self.resolved_head,
                "ttt_steps": self.resolved_ttt_steps}

    def key(self, target_fingerprint: str) -> str:
        """Short hash of this config on this target (cache folder names)."""
        blob = json.dumps({"config": self.to_dict(), "target": target_fingerprint, "version": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]
