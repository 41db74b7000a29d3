"""The frozen target's view of a training batch: next-token logits and tapped hidden states.

It runs through the same ``TargetRunner.prefill`` path that feeds the drafter at inference, so
the head trains on exactly the features it will see when drafting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from drafters.head import ConcatKV, DraftHead
from jetflow_bench.target import TargetRunner
from jetflow_bench.training.losses import distill_loss


@dataclass
class TeacherBatch:
    tokens: torch.Tensor  # (B, T) right-padded token ids
    lengths: torch.Tensor  # (B,) real tokens per row
    prompt_lengths: torch.Tensor  # (B,) leading prompt tokens per row: context only, never predicted
    logits: torch.Tensor  # (B, T, V) float32; row t = the target's distribution of token t+1
    taps: torch.Tensor  # (B, T, K, H) tapped layer outputs, in the head's tap order

    @property
    def positions(self) -> torch.Tensor:
        """(B, T) absolute positions."""
        b, t = self.tokens.shape
        return torch.arange(t, device=self.tokens.device).expand(b, t)

    def random_positions(self, count: int, room: int, generator: torch.Generator) -> torch.Tensor:
        """(B, count) uniform positions p in [max(1, prompt_len - 1), len - 1 - room] per row: the
        token after p is continuation (so is everything predicted from p onwards) and ``room``
        real tokens follow p."""
        first = (self.prompt_lengths.cpu() - 1).clamp(min=1)  # (B,)
        last = torch.maximum(self.lengths.cpu() - 1 - room, first)  # (B,)
        picks = first[:, None] + (torch.rand(len(last), count, generator=generator) * (last - first + 1)[:, None]).long()
        return picks.to(self.tokens.device)

    def distill(
        self, head: DraftHead, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, weights: torch.Tensor,
        kind: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, top-1 agreement) of the head's outputs ``hidden`` (M, H), each predicting the token
        after position ``cols`` of row ``rows`` (M,) against the target's distribution there.

        A head with a draft vocabulary is distilled against the target's distribution restricted
        to those tokens and renormalised (EAGLE-3's recipe); its agreement is with the target's
        own argmax over the whole vocabulary, so a token outside the draft vocabulary counts as a miss.
        """
        teacher = self.logits[rows, cols]  # (M, V)
        draft = head.logits(hidden)  # (M, V) or (M, N)
        restricted = teacher if head.d2t is None else teacher[:, head.d2t]
        loss, _ = distill_loss(draft, restricted, weights, kind)
        agree = (head.to_target(draft.argmax(-1)) == teacher.argmax(-1)).float().mean()
        return loss, agree

    def context(self, head: DraftHead) -> tuple[torch.Tensor, ConcatKV]:
        """Fused features (B, T, H) of every position and a store holding their keys/values."""
        fused = head.fuse(self.taps)
        return fused, ConcatKV(head.context_kv(fused, self.positions))


def teacher_batch(
    target: TargetRunner, tokens: torch.Tensor, lengths: torch.Tensor, prompt_lengths: torch.Tensor, taps: Sequence[int]
) -> TeacherBatch:
    """One target forward over the batch (no gradients); padding rows are never used downstream."""
    rows = [row[:n].tolist() for row, n in zip(tokens, lengths.tolist(), strict=True)]
    out = target.score(rows, taps=taps)  # hidden comes in the head's tap order
    # .clone() outside inference mode turns inference tensors into ordinary autograd inputs.
    device = target.device
    return TeacherBatch(tokens.to(device), lengths.to(device), prompt_lengths.to(device), out.logits.clone(), out.hidden.clone())
