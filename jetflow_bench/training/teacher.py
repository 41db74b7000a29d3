"""The frozen target's view of a training batch: next-token logits and tapped hidden states.

It runs through the same ``TargetRunner.prefill`` path that feeds the drafter at inference, so
the head trains on exactly the features it will see when drafting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.heads.head import ConcatKV, DraftHead


@dataclass
class TeacherBatch:
    tokens: torch.Tensor  # (B, T) right-padded token ids
    lengths: torch.Tensor  # (B,) real tokens per row
    logits: torch.Tensor  # (B, T, V) float32; row t = the target's distribution of token t+1
    taps: torch.Tensor  # (B, T, K, H) tapped layer outputs, in the head's tap order

    @property
    def positions(self) -> torch.Tensor:
        """(B, T) absolute positions."""
        b, t = self.tokens.shape
        return torch.arange(t, device=self.tokens.device).expand(b, t)

    def random_positions(self, count: int, room: int, generator: torch.Generator) -> torch.Tensor:
        """(B, count) uniform positions in [1, len - 1 - room] per row (``room`` real tokens follow)."""
        last = (self.lengths.cpu() - 1 - room).clamp(min=1)  # (B,)
        picks = 1 + (torch.rand(len(last), count, generator=generator) * last[:, None]).long()
        return picks.to(self.tokens.device)

    def context(self, head: DraftHead) -> tuple[torch.Tensor, ConcatKV]:
        """Fused features (B, T, H) of every position and a store holding their keys/values."""
        fused = head.fuse(self.taps)
        return fused, ConcatKV(head.context_kv(fused, self.positions))


def teacher_batch(target: TargetRunner, tokens: torch.Tensor, lengths: torch.Tensor, taps: Sequence[int]) -> TeacherBatch:
    """One target forward over the batch (no gradients); padding rows are never used downstream."""
    rows = [row[:n].tolist() for row, n in zip(tokens, lengths.tolist(), strict=True)]
    out = target.score(rows, taps=taps)  # hidden comes in the head's tap order
    # .clone() outside inference mode turns inference tensors into ordinary autograd inputs.
    return TeacherBatch(tokens.to(target.device), lengths.to(target.device), out.logits.clone(), out.hidden.clone())
