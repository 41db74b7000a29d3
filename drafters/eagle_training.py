"""Training objective of the EAGLE head, with training-time test (own features fed back): `EagleTraining`.

A root at position r (token x_r, fed with the target's fused feature f_{r-1}) sees the context
features of positions < r and predicts x_{r+1} against the target's distribution at r. Step s of
the test feeds x_{r+s} together with the head's OWN output of step s-1 — exactly what drafting
does below the root — and sees the same context plus the root's earlier steps (its ancestors):

    step 0: [x_r   ; f_{r-1}]   -> out_0 -> predicts x_{r+1}
    step 1: [x_r+1 ; out_0  ]   -> out_1 -> predicts x_{r+2}      (also sees step-0 entry of r)

Roots are ``4 x anchors`` random positions per sequence; they are independent, so all run together.
The test runs ``ttt_steps`` steps: by default the depth the head drafts, block_size - 1, as EAGLE-3
trains every step it will draft (its released recipe unrolls 7). Head compute per optimiser step
grows linearly with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from jetflow_bench.errors import JfbenchError
from jetflow_bench.heads.head import DraftHead
from jetflow_bench.heads.masks import context_allowed, join
from jetflow_bench.training.losses import depth_weights, distill_loss
from jetflow_bench.training.objective import TrainingObjective

if TYPE_CHECKING:
    from jetflow_bench.training.config import TrainConfig
    from jetflow_bench.training.teacher import TeacherBatch


class EagleTraining(TrainingObjective):
    """EAGLE: one causal layer fed [token ; parent feature], trained with training-time test."""

    head_modes = ("causal",)

    def validate(self, config: TrainConfig) -> None:
        if config.ttt_steps is not None and config.ttt_steps < 1:
            raise JfbenchError(f"--ttt-steps {config.ttt_steps} must be at least 1")

    def settings(self, config: TrainConfig) -> dict[str, Any]:
        """Training-time-test steps: the drafted depth (block_size - 1) unless ``--ttt-steps`` says otherwise."""
        return {"ttt_steps": config.ttt_steps or config.block_size - 1}

    def head_layers(self, target_layers: int) -> int:
        """One layer whatever the target's depth, as EAGLE-1/2/3 are built."""
        return 1

    def head_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"eagle_input": True}

    def loss(
        self, head: DraftHead, batch: TeacherBatch, config: TrainConfig, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, top-1 agreement) over the ``ttt_steps`` steps of every sampled root."""
        n = config.anchors * 4  # roots per sequence
        roots = batch.random_positions(n, 0, generator)  # (B, N) in [1, len-1]
        t, device = batch.tokens.shape[1], roots.device
        fused, store = batch.context(head)  # (B, T, H), keys/values of every position
        sees_context = context_allowed(roots, t)  # (B, N, T)
        own = torch.eye(n, dtype=torch.bool, device=device)  # (N, N): a root's entry at each step
        feature = fused.gather(1, (roots - 1)[..., None].expand(-1, -1, fused.shape[-1]))  # (B, N, H) = f_{r-1}
        draft, teacher, weights = [], [], []
        for step in range(self.settings(config)["ttt_steps"]):
            pos = roots + step  # (B, N)
            x = head.eagle_inputs(batch.tokens.gather(1, pos.clamp(max=t - 1)), feature)  # (B, N, H)
            mask = join(sees_context, own.repeat(1, step + 1), x.dtype)  # earlier steps of the same root + itself
            feature = head(x, pos, mask, store)  # (B, N, H)
            store.absorb()
            rows, cols = (pos < batch.lengths[:, None]).nonzero(as_tuple=True)
            draft.append(head.logits(feature[rows, cols]))
            teacher.append(batch.logits[rows, pos[rows, cols]])
            weights.append(depth_weights(torch.full((rows.numel(),), step + 1, device=device), config.decay))
        return distill_loss(torch.cat(draft), torch.cat(teacher), torch.cat(weights), config.loss)


EAGLE_TRAINING = EagleTraining()
