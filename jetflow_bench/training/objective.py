"""The contract between the training loop and a drafter family: `TrainingObjective`.

A family declares how its heads train (an objective, or a lazy ``"module:attr"`` string naming
one, on its `jetflow_bench.plugins.Family` record). The objective builds the family's recipes
(`config`: a `TrainConfig` that carries it, so nothing reading one looks a family up). The loop
(`training.loop`) draws batches, runs the frozen target and steps the optimiser; everything that
varies with the family — the head it builds, the batch layout, the loss, its own option checks —
comes from the objective. This package names no drafter.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.heads.masks import BLOCK_MODES
from jetflow_bench.training.config import DEEP_TARGET, SHARED_FIELDS, TrainConfig
from jetflow_bench.training.recipe import RecipeOption, resolve_options

if TYPE_CHECKING:
    import torch

    from jetflow_bench.heads.head import DraftHead
    from jetflow_bench.training.teacher import TeacherBatch

HEAD_DEPTH_RATIO = 7  # shallow (toy) targets: a head of ~1/7 of their depth, at least 2 layers
PAPER_HEAD_SHARE = 5 / 36  # the paper: a 5-layer head, 5 tapped layers, for a 36-layer target


class TrainingObjective(ABC):
    """How one drafter family trains its head against the frozen target.

    Per optimiser step the loop builds a `TeacherBatch` (the target's next-token logits and the
    outputs of the head's tapped layers, ``head.cfg.taps``, for a batch of token sequences) and
    calls `loss`; the head it trains is a `jetflow_bench.heads.head.DraftHead` shaped by `head_layers` and
    `head_options`.
    """

    default_head: str = "causal"  # in-block attention when the recipe names none (jetflow_bench.heads.masks.BLOCK_MODES)
    head_modes: ClassVar[tuple[str, ...]] = BLOCK_MODES  # the modes this family can train
    # Fields the family's heads recorded, at these values, before the family owned its fields (see `record`).
    recorded: ClassVar[Mapping[str, Any]] = {}

    def config(self, family: str, recipe: Iterable[RecipeOption], **fields: Any) -> TrainConfig:
        """The recipe of a head of ``family`` (whose own fields ``recipe`` declares) from flat
        fields, shared and its own alike (``options``: a mapping of its own, flat ones win), checked:
        every declared field present (its default filled in), the head mode one this family trains,
        `validate`. A field its heads recorded before it owned its fields (`recorded`) is dropped
        at its recorded value; any other undeclared one is refused, naming the family's options."""
        own = {o.name for o in recipe}
        options = dict(fields.pop("options", None) or {})
        for key in [k for k in fields if k not in SHARED_FIELDS]:
            value = fields.pop(key)
            if key not in own and key in self.recorded and self.recorded[key] == value:
                continue
            options[key] = value
        options = resolve_options(family, recipe, options)
        config = TrainConfig(drafter=family, options=options, objective=self, **fields)
        if config.mode not in self.head_modes:
            raise JfbenchError(f"--head {config.head}: {family} trains {' or '.join(self.head_modes)} heads only")
        self.validate(config)
        return config

    def validate(self, config: TrainConfig) -> None:  # noqa: B027 - optional hook
        """Refuse combinations of settings this family cannot train (raise `JfbenchError` naming
        the option); each option's own type and range are checked from its `RecipeOption`."""

    def settings(self, config: TrainConfig) -> dict[str, Any]:
        """Effective values of the options whose None means "the family decides" (e.g. ``layout``)."""
        return {}

    def record(self, config: TrainConfig) -> dict[str, Any]:
        """The options as written into the recipe record and hashed into the cache key: the
        given values, those the family resolves (`settings`) where it records them resolved,
        and the `recorded` legacy fields, so heads cached before keep their keys."""
        return {**self.recorded, **config.option_values}

    def head_layers(self, target_layers: int) -> int:
        """Draft layers of a new head when the recipe sets none: the paper's 5/36 of the target's
        depth from 24 layers on (SmolLM2's 30 give 4, Qwen3-8B's 36 give 5); shallower, ~1/7 of
        it, at least 2 (micro 2 of 3, tiny 2 of 6, deep 2 of 14: the toy heads keep their keys)."""
        if target_layers >= DEEP_TARGET:
            return round(target_layers * PAPER_HEAD_SHARE)
        return max(2, round(target_layers / HEAD_DEPTH_RATIO))

    def head_taps(self, layers: int) -> int | None:
        """Tapped target layers of a ``layers``-layer head whose recipe sets neither, on a target of at
        least `DEEP_TARGET` layers: as many as draft layers, as the paper builds its heads. None:
        the recipe's `TrainConfig.num_taps` (EAGLE-3 fuses three whatever its depth)."""
        return layers

    def head_options(self, config: TrainConfig) -> dict[str, Any]:
        """`jetflow_bench.heads.head.HeadConfig` fields this family sets beyond the shared ones (e.g. its input wiring)."""
        return {}

    def heldout_hits(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The held-out acceptance proxy's raw material: the head drafting as at inference from
        random continuation positions of ``batch`` (the true path as context), returning (hit,
        valid), (R, D) bool each: whether its top-1 at depth d equals the target's greedy token,
        and whether depth d lies inside the sequence. None: the family tracks no proxy."""
        return None

    @abstractmethod
    def loss(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss to minimise, top-1 agreement share with the target) of one batch; draw every
        random choice from ``generator`` (seeded per step, so a resumed run sees the same batches)."""
