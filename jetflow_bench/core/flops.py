"""FLOP estimates of one transformer forward, from the modules' own shapes (no profiler).

Why estimates: drafters are compared at equal compute and CPU runs are projected onto GPUs, so
every step row carries how much arithmetic its draft and its verification took. The count is the
standard dense-transformer one (Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
§2.1: a forward costs 2 FLOPs per parameter per token, plus attention over the context):

    flops(n tokens, k keys, m logit rows) = 2 · L · P_layer · n      (projections + MLP)
                                          + 4 · L · H_q · d_h · n · k (QKᵀ and AV, 2 FLOPs per MAC each)
                                          + 2 · P_lm · m             (LM head on the rows that need logits)

with L layers, P_layer the weight count of one layer's matrices (norm scales are negligible and
left out), H_q query heads of width d_h, and P_lm = vocab × hidden. Element-wise work (RoPE,
softmax, SwiGLU gates) is ignored: it is a few percent at these shapes. For a mixture-of-experts
layer every expert's weights are counted, an upper bound on the active compute.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn


def matrix_params(modules: Iterable[nn.Module]) -> int:
    """Weights of every matrix (parameters with 2 or more dims) in ``modules``."""
    return sum(p.numel() for m in modules for p in m.parameters() if p.dim() >= 2)


@dataclass(frozen=True)
class TransformerShape:
    """What the FLOP formula needs to know about a stack of decoder layers and its LM head."""

    layers: int  # L
    layer_params: int  # P_layer: matrix weights of ONE layer (attention projections + MLP)
    lm_head_params: int  # P_lm = vocab × hidden
    q_heads: int  # H_q
    head_dim: int  # d_h

    @classmethod
    def of(cls, layers: list[nn.Module], lm_head: nn.Module, q_heads: int, head_dim: int) -> TransformerShape:
        return cls(len(layers), matrix_params(layers) // max(len(layers), 1), matrix_params([lm_head]), q_heads, head_dim)

    def layer_flops(self, tokens: int, keys: int) -> float:
        """The decoder layers over ``tokens`` queries attending to ``keys`` keys each (no LM head)."""
        dense = 2 * self.layers * self.layer_params * tokens
        attention = 4 * self.layers * self.q_heads * self.head_dim * tokens * keys
        return float(dense + attention)

    def lm_head_flops(self, rows: int) -> float:
        return float(2 * self.lm_head_params * rows)

    def forward_flops(self, tokens: int, keys: int, logit_rows: int | None = None) -> float:
        """A full forward: layers + LM head (on every token unless ``logit_rows`` says otherwise)."""
        return self.layer_flops(tokens, keys) + self.lm_head_flops(tokens if logit_rows is None else logit_rows)
