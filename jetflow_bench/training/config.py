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

# A head's in-block attention mode is "causal" or "bidirectional" (jetflow_bench.heads.masks.BLOCK_MODES);
# "diffusion", DFlash's name for the bidirectional block, is accepted for it on input.
HEAD_ALIASES = {"diffusion": "bidirectional"}
LOSSES = ("fkl", "rkl", "sft")
DATA = ("regen", "raw")
SOURCES = ("gsm8k", "mbpp", "sharegpt")
# Bump when the training code changes in a way that alters the weights, so cached heads retrain.
# 2: taps never include a shallow target's final layer (jetflow_bench.heads.checkpoint.default_taps).
RECIPE_VERSION = 2


def canonical_head(name: str | None) -> str | None:
    """The head mode ``name`` stands for: ``diffusion`` -> ``bidirectional``; others unchanged."""
    return HEAD_ALIASES.get(name, name) if name is not None else None


def default_head_layers(drafter: str, target_layers: int) -> int:
    """Draft layers of a new ``drafter`` head for a target of ``target_layers`` (its objective's `head_layers`)."""
    from jetflow_bench.training.objective import objective_for

    return objective_for(drafter)[1].head_layers(target_layers)


@dataclass(frozen=True)
class TrainConfig:
    """A draft-head training run (defaults sized for the toy targets on a 2-core CPU)."""

    drafter: str  # a registered drafter family with a training objective (built in: eagle, dflash, jetflow)
    head: str | None = None  # causal | bidirectional (alias diffusion); None = the family's (dflash: bidirectional)
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
    num_taps: int = 3  # K target layers fused (see jetflow_bench.heads.checkpoint.default_taps)
    block_size: int = 16  # anchor + D drafted positions (block heads)
    anchors: int = 16  # blocks per sequence per step (block heads)
    ttt_steps: int | None = None  # eagle: training-time-test steps; None = its drafted depth (drafters/eagle_training.py)
    decay: float = 7.0  # loss weight exp(-(k-1)/decay) at drafted depth k; 0 = uniform
    prefix_zero: float = 0.5  # jetflow: share of blocks trained all-masks (pass 1); the rest keep a real prefix
    layout: str | None = None  # block heads: prefix | packed; None = packed for a causal jetflow head, else prefix
    seed: int = 0

    def __post_init__(self) -> None:
        from jetflow_bench.heads.masks import BLOCK_MODES  # torch: not at import (`--help` reads this module)
        from jetflow_bench.training.objective import objective_for

        family, _ = objective_for(self.drafter)  # unknown or untrainable drafters: one-line error
        object.__setattr__(self, "drafter", family)  # aliases, and arms reading another family's heads
        object.__setattr__(self, "head", canonical_head(self.head))
        choices = {"loss": (self.loss, LOSSES), "data": (self.data, DATA)}
        for option, (value, allowed) in choices.items():
            if value not in allowed:
                raise JfbenchError(f"--{option} {value!r} is unknown: choose one of {', '.join(allowed)}")
        if self.head is not None and self.head not in BLOCK_MODES:
            raise JfbenchError(f"--head {self.head!r} is unknown: choose one of {', '.join(BLOCK_MODES)}")
        if self.mode not in self.objective.head_modes:
            raise JfbenchError(f"--head {self.head}: {self.drafter} trains {' or '.join(self.objective.head_modes)} heads only")
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
    def resolved_layout(self) -> str | None:
        """Training-block layout the family uses (None: it trains no blocks)."""
        return self.objective.settings(self).get("layout")

    @property
    def resolved_ttt_steps(self) -> int | None:
        """Training-time-test steps the family runs (None: it runs none)."""
        return self.objective.settings(self).get("ttt_steps")

    @property
    def mode(self) -> str:
        """In-block attention of the trained head (`HeadConfig.mode`): the recipe's, else the family's default."""
        return self.head or self.objective.default_head

    def num_layers(self, target_layers: int) -> int:
        return self.layers or self.objective.head_layers(target_layers)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "corpus": list(self.corpus), "head": self.mode,
                "ttt_steps": self.resolved_ttt_steps}

    def key(self, target_fingerprint: str) -> str:
        """Short hash of this config on this target (cache folder names)."""
        blob = json.dumps({"config": self.to_dict(), "target": target_fingerprint, "version": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]
