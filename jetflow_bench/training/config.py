"""Every choice that determines a trained draft head, in one frozen record: `TrainConfig`.

The record (minus run-only fields) is hashed into cache keys and written into the checkpoint's
config.json, so a head always says how it was made and a changed default trains a new head.
It is built by its family's `TrainingObjective` (`TrainingObjective.config`: the family's own
fields resolved from its `RecipeOption`s, its checks), which it carries: its methods ask that
objective and look nothing up. `train_config` finds the objective by a drafter's name, once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.hashing import hashed_fields
from jetflow_bench.plugins import family_of, recipe_defaults

# A head's in-block attention mode is "causal" or "bidirectional" (jetflow_bench.heads.masks.BLOCK_MODES);
# "diffusion", DFlash's name for the bidirectional block, is accepted for it on input.
HEAD_ALIASES = {"diffusion": "bidirectional"}
LOSSES = ("fkl", "rkl", "sft")
DATA = ("regen", "raw")
SOURCES = ("gsm8k", "mbpp", "sharegpt")
# Bump when the training code changes in a way that alters the weights, so cached heads retrain.
# 2: taps never include a shallow target's final layer (jetflow_bench.heads.checkpoint.default_taps).
# 3: the loss covers the continuation only (anchors and roots never predict a prompt token);
#    optional reduced draft vocabulary (`draft_vocab`).
# 4: `heldout` sequences kept out of training for the acceptance proxy.
RECIPE_VERSION = 4
DEEP_TARGET = 24  # targets at least this deep get the paper's proportion (`TrainingObjective.head_layers`)
# The shared fields every head's record (and so its cache key) has held, at any value, since before
# the rule of `hashed_fields`: any other field is left out at its default, so a new field keeps the keys.
ALWAYS_RECORDED = ("head", "loss", "data", "corpus", "prompts", "max_new_tokens", "steps", "batch_size", "seq_len", "lr",
                   "warmup", "grad_clip", "layers", "num_taps", "block_size", "anchors", "decay", "heldout", "eval_every",
                   "stop_on_plateau", "draft_vocab", "seed")


def canonical_head(name: str | None) -> str | None:
    """The head mode ``name`` stands for: ``diffusion`` -> ``bidirectional``; others unchanged."""
    return HEAD_ALIASES.get(name, name) if name is not None else None


def target_depth(target: Any) -> int | None:
    """Layers of ``target`` (a loaded `TargetRunner`, a model folder or a `--target` name) read from
    its config.json without loading weights; None for a hub id."""
    if hasattr(target, "layers"):
        return len(target.layers)
    from jetflow_bench.targets import resolve_target

    try:
        return int(json.loads((Path(resolve_target(target)) / "config.json").read_text())["num_hidden_layers"])
    except (OSError, ValueError, KeyError):
        return None


def default_head_layers(drafter: str, target_layers: int) -> int:
    """Draft layers of a new ``drafter`` head for a target of ``target_layers`` (its objective's `head_layers`)."""
    return family_of(drafter).objective().head_layers(target_layers)


def train_config(drafter: str, **fields: Any) -> TrainConfig:
    """The recipe of a head for the arm ``drafter`` from flat fields, shared and the family's own
    alike (``options``, a mapping of the family's own, also accepted), as `jfbench train`,
    `ensure_head`, recorded recipes (config.json) and ablation variants give them: its family's
    objective builds it (`TrainingObjective.config`), from the arm's defaults (jetflow-refine: the
    packed layout). An unknown or untrainable drafter is a one-line error."""
    family = family_of(drafter)
    options = {**recipe_defaults(drafter), **dict(fields.pop("options", None) or {})}
    return family.objective().config(family.name, family.recipe, options=options, **fields)


def recipe_fields(drafter: str) -> set[str]:
    """Every flat field `train_config` accepts for ``drafter``."""
    family = family_of(drafter)
    return set(SHARED_FIELDS) | {o.name for o in family.recipe} | set(family.objective().recorded)


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
    decay: float = 7.0  # loss weight exp(-(k-1)/decay) at drafted depth k; 0 = uniform
    heldout: int = 32  # sequences held out for the acceptance proxy (at most a fifth of the data; 0 = none)
    eval_every: int | None = None  # steps between held-out evaluations; None = steps // 20 (at least 1)
    stop_on_plateau: bool = False  # end once the held-out proxy moved < 2% over the last 20% of the steps
    draft_vocab: int | None = None  # head scores only the N most frequent continuation tokens (EAGLE-3's d2t); None = all
    seed: int = 0  # initialisation and batch order; also the prompt draw unless data_seed is set
    data_seed: int | None = None  # the training-prompt draw alone: heads of several seeds share one data set
    # The family's own fields (its record's `RecipeOption`s, e.g. eagle's ttt_steps, the block
    # heads' layout): stored as sorted (name, value) pairs, every declared field present (the
    # objective fills in the defaults: `TrainingObjective.config`), so equal recipes compare and hash equal.
    options: Mapping[str, Any] | tuple[tuple[str, Any], ...] = ()

    # The family's `TrainingObjective`, which built this record and reads its options (not compared: the drafter says which).
    objective: Any = field(kw_only=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Checks of the shared fields (the family's own: `TrainingObjective.config`)."""
        from jetflow_bench.heads.masks import BLOCK_MODES  # torch: not at import (`--help` reads this module)

        if isinstance(self.options, Mapping):
            object.__setattr__(self, "options", tuple(sorted(self.options.items())))
        object.__setattr__(self, "head", canonical_head(self.head))
        object.__setattr__(self, "decay", float(self.decay))  # `--decay 0` from ablate's value parser is an int
        choices = {"loss": (self.loss, LOSSES), "data": (self.data, DATA)}
        for option, (value, allowed) in choices.items():
            if value not in allowed:
                raise JfbenchError(f"--{option} {value!r} is unknown: choose one of {', '.join(allowed)}")
        if self.head is not None and self.head not in BLOCK_MODES:
            raise JfbenchError(f"--head {self.head!r} is unknown: choose one of {', '.join(BLOCK_MODES)}")
        unknown = [s for s in self.corpus if s not in SOURCES]
        if unknown or not self.corpus:
            raise JfbenchError(f"--corpus {','.join(self.corpus)!r}: choose from {', '.join(SOURCES)}")
        if self.block_size < 2 or self.steps < 1 or self.batch_size < 1 or self.prompts < 1:
            raise JfbenchError("--block-size must be >= 2 and --steps, --batch-size, --prompts >= 1")
        if self.heldout < 0 or (self.eval_every is not None and self.eval_every < 1):
            raise JfbenchError("--heldout must be 0 or more and --eval-every at least 1")
        if self.draft_vocab is not None and self.draft_vocab < 1:
            raise JfbenchError(f"--draft-vocab {self.draft_vocab} must be at least 1 (omit it for the whole vocabulary)")
        if self.data_seed is not None and self.data_seed < 0:
            raise JfbenchError(f"--data-seed {self.data_seed} must be 0 or more (omit it to draw prompts with --seed)")
        if not self.decay >= 0:
            raise JfbenchError(f"--decay {self.decay} must be 0 (uniform) or positive")
        if self.seq_len < self.block_size + 2:
            raise JfbenchError(f"--seq-len {self.seq_len} must exceed the block size ({self.block_size}) + 1")

    @property
    def prompt_seed(self) -> int:
        """The seed of the training-prompt draw (so of the regenerated data and its held-out part)."""
        return self.seed if self.data_seed is None else self.data_seed

    @property
    def option_values(self) -> dict[str, Any]:
        """The family's own fields, every declared one present (None: the family decides, see `setting`)."""
        return dict(self.options)  # type: ignore[arg-type]  # pairs after __post_init__

    def setting(self, name: str) -> Any:
        """Effective value of the family's option ``name``: what the family resolves a None to, else
        the given value; None for a field the family does not have (e.g. ``layout`` for eagle)."""
        resolved = self.objective.settings(self)
        return resolved[name] if name in resolved else self.option_values.get(name)

    @property
    def mode(self) -> str:
        """In-block attention of the trained head (`HeadConfig.mode`): the recipe's, else the family's default."""
        return self.head or self.objective.default_head

    def for_target(self, target_layers: int | None) -> TrainConfig:
        """This recipe with the head's shape made explicit where the target's depth decides it: on a
        target of at least 24 layers a recipe that sets no ``layers`` gets the paper's proportion
        (`TrainingObjective.head_layers`) and as many tapped layers (`head_taps`), recorded, so the
        head's cache key says so. Shallower targets, a recipe that sets ``layers``, and an unknown
        depth (None: a hub id) keep the recipe as given, and so their cache keys."""
        if target_layers is None or target_layers < DEEP_TARGET or self.layers is not None:
            return self
        layers = self.objective.head_layers(target_layers)
        taps = self.objective.head_taps(layers)
        return self if taps is None else dataclasses.replace(self, layers=layers, num_taps=taps)

    def num_layers(self, target_layers: int) -> int:
        return self.layers or self.objective.head_layers(target_layers)

    def to_dict(self) -> dict:
        """The recipe record: shared fields and the family's own (`TrainingObjective.record`), flat."""
        shared = hashed_fields({name: getattr(self, name) for name in SHARED_FIELDS}, TrainConfig, ALWAYS_RECORDED)
        return {**shared, "corpus": list(self.corpus), "head": self.mode, **self.objective.record(self)}

    def resolved(self, target_layers: int | None = None) -> dict[str, Any]:
        """Every recipe field at the value the head trains with: the record (`to_dict`), the options the
        family resolves (an unset block layout), the prompt draw's seed and, given the target's depth,
        the draft layers and tapped layers. Two recipes compare field by field here."""
        out = {**self.to_dict(), **self.objective.settings(self), "data_seed": self.prompt_seed}
        if target_layers is not None:
            out |= {"layers": self.num_layers(target_layers), "num_taps": min(self.num_taps, target_layers)}
        return out

    def key(self, target_fingerprint: str) -> str:
        """Short hash of this config on this target (cache folder names)."""
        blob = json.dumps({"config": self.to_dict(), "target": target_fingerprint, "version": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


# The fields every family's recipe has, in the record's order (`to_dict`).
SHARED_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("options", "objective"))
