"""Training objective of the EAGLE head, with training-time test (own features fed back): `EagleTraining`.

A root at position r (token x_r, fed with the target's fused feature f_{r-1}) sees the context
features of positions < r and predicts x_{r+1} against the target's distribution at r. Step s of
the test feeds x_{r+s} together with the head's OWN output of step s-1 — exactly what drafting
does below the root — and sees the same context plus the root's earlier steps (its ancestors):

    step 0: [x_r   ; f_{r-1}]   -> out_0 -> predicts x_{r+1}
    step 1: [x_r+1 ; out_0  ]   -> out_1 -> predicts x_{r+2}      (also sees step-0 entry of r)

Roots are ``4 x anchors`` random positions per sequence whose next token is continuation (the
prompt is context, never a target); they are independent, so all run together.
The test runs ``ttt_steps`` steps: by default the depth the head drafts, block_size - 1, as EAGLE-3
trains every step it will draft (its released recipe unrolls 7). Head compute per optimiser step
grows linearly with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from drafters.eagle import EAGLE_RECORDED
from jetflow_bench.heads.head import DraftHead
from jetflow_bench.heads.masks import context_allowed, join
from jetflow_bench.training.losses import depth_weights
from jetflow_bench.training.objective import TrainingObjective

if TYPE_CHECKING:
    from jetflow_bench.training.config import TrainConfig
    from jetflow_bench.training.teacher import TeacherBatch


class EagleTraining(TrainingObjective):
    """EAGLE: one causal layer fed [token ; parent feature], trained with training-time test."""

    head_modes = ("causal",)
    recorded = EAGLE_RECORDED

    def settings(self, config: TrainConfig) -> dict[str, Any]:
        """Training-time-test steps: the drafted depth (block_size - 1) unless ``--ttt-steps`` says otherwise."""
        return {"ttt_steps": config.option_values["ttt_steps"] or config.block_size - 1}

    def record(self, config: TrainConfig) -> dict[str, Any]:
        """``ttt_steps`` recorded resolved: a head trained with the default depth's steps named is the same head."""
        return {**super().record(config), **self.settings(config)}

    def head_layers(self, target_layers: int) -> int:
        """One layer whatever the target's depth, as EAGLE-1/2/3 are built."""
        return 1

    def head_taps(self, layers: int) -> int | None:
        return None  # EAGLE-3's three taps

    def head_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"eagle_input": True}

    def unroll(self, head: DraftHead, batch: TeacherBatch, roots: torch.Tensor, steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The training-time test from ``roots`` (B, N): per step, the head's outputs (B, N, H) and
        their positions (B, N); the output at position q predicts x_{q+1}."""
        n, t = roots.shape[1], batch.tokens.shape[1]
        fused, store = batch.context(head)  # (B, T, H), keys/values of every position
        sees_context = context_allowed(roots, t)  # (B, N, T)
        own = torch.eye(n, dtype=torch.bool, device=roots.device)  # (N, N): a root's entry at each step
        feature = fused.gather(1, (roots - 1)[..., None].expand(-1, -1, fused.shape[-1]))  # (B, N, H) = f_{r-1}
        for step in range(steps):
            pos = roots + step  # (B, N)
            x = head.eagle_inputs(batch.tokens.gather(1, pos.clamp(max=t - 1)), feature)  # (B, N, H)
            mask = join(sees_context, own.repeat(1, step + 1), x.dtype)  # earlier steps of the same root + itself
            feature = head(x, pos, mask, store)  # (B, N, H)
            store.absorb()
            yield feature, pos

    def loss(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, top-1 agreement) over the ``ttt_steps`` steps of every sampled root."""
        roots = batch.random_positions(config.anchors * 4, 0, generator)  # (B, N): x_{r+1} onwards is continuation
        outputs, out_rows, teacher_cols, weights = [], [], [], []
        for step, (feature, pos) in enumerate(self.unroll(head, batch, roots, self.settings(config)["ttt_steps"])):
            rows, cols = (pos < batch.lengths[:, None]).nonzero(as_tuple=True)
            outputs.append(feature[rows, cols])
            out_rows.append(rows)
            teacher_cols.append(pos[rows, cols])  # the target's distribution at x_{r+s} is of x_{r+s+1}
            weights.append(depth_weights(torch.full((rows.numel(),), step + 1, device=roots.device), config.decay))
        return batch.distill(head, torch.cat(outputs), torch.cat(out_rows), torch.cat(teacher_cols), torch.cat(weights), config.loss)

    def heldout_hits(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafting as at inference along the true path from ``anchors`` roots per sequence, D =
        block_size - 1 steps; (hit, valid), (R, D) each: whether the top-1 at depth d is the target's greedy token."""
        depth = config.block_size - 1
        roots = batch.random_positions(config.anchors, depth - 1, generator)  # (B, N)
        hits, valid = [], []
        for feature, pos in self.unroll(head, batch, roots, depth):
            hits.append(head.to_target(head.logits(feature).argmax(-1)) == batch.argmax.gather(1, pos.clamp(max=batch.tokens.shape[1] - 1)))
            valid.append(pos < batch.lengths[:, None])
        return torch.stack(hits, -1).flatten(0, 1), torch.stack(valid, -1).flatten(0, 1)


EAGLE_TRAINING = EagleTraining()
