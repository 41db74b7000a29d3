"""`--budgets auto` in a sweep: the policy of one cell, priced by this device's own verify times.

Before an auto cell's timed decode (and after its warm-up), the target's verify step — the forward
plus the engine's bookkeeping around it, exactly what `jfbench bench verify-cost` times — is
measured at every candidate budget, at batch 1 and at the cell's batch size (rows leave the batch
as they finish); between two measured batch sizes the time is interpolated linearly. Measuring in
the cell itself keeps the policy honest on a shared machine: the curve is the one the cell runs on.
The measurement is not part of the cell's timed region. Drafting seconds are learned online by the
policy (`jetflow_bench.core.budget_policy`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import torch

from jetflow_bench.core.budget_policy import BudgetPolicy, StepCost
from jetflow_bench.engine.acceptance import accept_tree
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.projection.measure import complete_tree, interleaved

REPEATS = 7  # timed repeats per (size, batch) point; the median is kept


def measure_step_cost(
    target: TargetRunner, sizes: Sequence[int], batch_sizes: Sequence[int], context: int, seed: int = 0
) -> dict[int, dict[int, float]]:
    """{batch: {tree size: median seconds of prepare + forward + greedy acceptance}}, made
    non-decreasing in the tree size (see the comment below); ``sizes`` ascending."""
    generator = torch.Generator().manual_seed(seed)
    vocab = int(target.lm_head.weight.shape[0])
    table: dict[int, dict[int, float]] = {}
    for b in batch_sizes:
        prompts = torch.randint(0, vocab, (b, context), generator=generator).tolist()
        target.prefill(prompts, capacity=context + max(sizes))
        try:
            steps = []
            for n in sizes:
                trees = [complete_tree(p[-1], n, vocab, generator) for p in prompts]

                def step(trees=trees) -> None:
                    batch = target.prepare(trees)
                    out = target.forward(batch)
                    accept_tree(batch.tokens, batch.parents, batch.depths, batch.valid, batch.ancestors,
                                out.logits.argmax(-1))

                steps.append(step)
            interleaved(steps, target.device, 1)  # warm-up, untimed
            timed = interleaved(steps, target.device, REPEATS)
            medians = np.array([statistics.median(t) for t in timed])
            # A forward over fewer tokens cannot cost more than one over more: other processes only
            # ever add time, so a size slower than a larger one is noise and takes the larger's time.
            monotone = np.minimum.accumulate(medians[::-1])[::-1]
            table[b] = {n: float(t) for n, t in zip(sizes, monotone, strict=True)}
        finally:
            target.release()
    return table


def table_cost(table: dict[int, dict[int, float]]) -> StepCost:
    """A `StepCost` from a measured table: linear in tree size and in batch size between points."""
    batches = sorted(table)

    def at_batch(b: int, n: int) -> float:
        sizes = sorted(table[b])
        return float(np.interp(n, sizes, [table[b][s] for s in sizes]))

    def cost(n: int, b: int) -> float:
        return float(np.interp(b, batches, [at_batch(x, n) for x in batches]))

    return cost


def cell_policy(target: TargetRunner, candidates: Sequence[int], batch_size: int, context: int) -> BudgetPolicy:
    """A fresh policy (prior calibration) priced by this device at this cell's batch size."""
    table = measure_step_cost(target, sorted(set(candidates)), sorted({1, batch_size}), context)
    return BudgetPolicy(tuple(candidates), table_cost(table))
