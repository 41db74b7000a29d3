"""The cost of one verify step, one drafting step and one plain decode step on a profiled device.

Roofline with a fixed term (every forward of N tokens per sequence at batch b, context L):

    t_forward = units · layer_overhead_s + max(bytes / achievable bandwidth, FLOPs / achievable compute)
    bytes     = weight bytes read (MoE: the experts the b·N tokens touch) + KV-cache bytes
    units     = layers + 1 (the LM head and sampling)

    t_AR(b)         = t_forward(target, N = 1)
    t_verify(N, b)  = t_forward(target, N)        (N = nodes verified, root included: ≤ the budget B)
    t_draft(b)      = P · t_forward(head, N = E / P)                 (P passes, E entries per sequence)
    t_step(N, b)    = t_draft + t_verify + bookkeeping_s
    speed-up        = τ · t_AR / t_step,   η = speed-up / τ = t_AR / t_step

With a calibration file (`jfbench bench verify-cost`), t_AR, t_verify and the bookkeeping come from
the measured table instead, and the profile it carries (fitted on the same device) prices the head.
Shapes and counting rules: `jetflow_bench.projection.shapes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from jetflow_bench.projection.hardware import HardwareProfile
from jetflow_bench.projection.shapes import ModelShape
from jetflow_bench.projection.verify_cost import Calibration


@dataclass(frozen=True)
class ForwardCost:
    seconds: float
    memory_s: float  # bytes / achievable bandwidth
    compute_s: float  # FLOPs / achievable compute
    overhead_s: float  # units · layer_overhead_s

    @property
    def bound(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"


def forward_cost(
    shape: ModelShape, hw: HardwareProfile, tokens_per_seq: float, batch: int, context: int, dtype_bytes: int
) -> ForwardCost:
    """One forward of `shape` over `tokens_per_seq` tokens for each of `batch` sequences (see module doc)."""
    tokens = max(1, round(tokens_per_seq * batch))
    n = tokens / batch
    read = shape.weight_bytes(tokens, dtype_bytes) + shape.kv_bytes(n, batch, context, dtype_bytes)
    memory_s = read / hw.bandwidth
    compute_s = shape.flops(n, batch, context) / hw.compute
    overhead_s = shape.overhead_units() * hw.layer_overhead_s
    return ForwardCost(overhead_s + max(memory_s, compute_s), memory_s, compute_s, overhead_s)


@dataclass(frozen=True)
class CostModel:
    """Everything that prices one step: target, device profile, dtype, context, optional calibration."""

    target: ModelShape
    hardware: HardwareProfile
    dtype_bytes: int
    context: int
    calibration: Calibration | None = None

    def forward(self, shape: ModelShape, tokens_per_seq: float, batch: int) -> ForwardCost:
        return forward_cost(shape, self.hardware, tokens_per_seq, batch, self.context, self.dtype_bytes)

    def verify_s(self, budget: float, batch: int) -> float:
        if self.calibration is not None:
            return self.calibration.verify_s(budget, batch)
        return self.forward(self.target, budget, batch).seconds

    def ar_s(self, batch: int) -> float:
        """A plain decode step: a verify of the root alone, plus its bookkeeping when measured."""
        if self.calibration is not None:
            return self.calibration.verify_s(1, batch) + self.calibration.bookkeeping_s(1, batch)
        return self.verify_s(1, batch)

    def draft_s(self, head: ModelShape | None, passes: float, entries: float, batch: int) -> float:
        """P sequential head forwards over E entries per sequence in all (E / P each)."""
        if head is None or passes <= 0:
            return 0.0
        return passes * self.forward(head, entries / passes, batch).seconds

    def bookkeeping_s(self, budget: float, batch: int) -> float:
        if self.calibration is not None:
            return self.calibration.bookkeeping_s(budget, batch)
        return self.hardware.bookkeeping_s
