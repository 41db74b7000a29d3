"""`jfbench bench verify-cost`: time the target's verify forward against tree size on this device.

For every batch size b: prefill b random prompts of `context` tokens, then for every tree size N
time (a) the engine's per-step work — `TargetRunner.prepare` (padding, tree masks, slots) and
greedy acceptance on the forward's argmax — and (b) the target forward itself, exactly the split the
engine records as `other_s` / `verify_s`. The trees are complete 4-ary trees (a plausible draft
shape; the forward's cost depends on N, not on the shape). Nothing is committed, so the cache stays
at `context` tokens and each forward overwrites the same slots. Warm-up forwards are not timed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from jetflow_bench.acceptance import greedy_accept
from jetflow_bench.projection.calibration import fit_profile
from jetflow_bench.projection.shapes import ModelShape
from jetflow_bench.runtime import synchronize
from jetflow_bench.target import TargetRunner
from jetflow_bench.tree import DraftTree

FANOUT = 4  # children per node of the timed trees
COPY_BYTES = 1 << 27  # 128 MiB buffer for the bandwidth probe (larger than any CPU cache)


def _tree(root: int, size: int, vocab: int, generator: torch.Generator) -> DraftTree:
    tokens = [root, *torch.randint(0, vocab, (size - 1,), generator=generator).tolist()]
    return DraftTree(tokens, [-1, *[(i - 1) // FANOUT for i in range(1, size)]])


def _timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def copy_bandwidth(device: torch.device, repeats: int) -> float:
    """Bytes/s of a large tensor copy (read + write counted)."""
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2 * COPY_BYTES / _timed(lambda: dst.copy_(src), device, repeats)


def measure(
    runner: TargetRunner, shape: ModelShape, sizes: Sequence[int], batch_sizes: Sequence[int], context: int,
    repeats: int, progress: Callable[[], None] | None = None, seed: int = 0,
) -> dict:
    """The calibration file's content (see jetflow_bench.projection.calibration)."""
    generator = torch.Generator().manual_seed(seed)
    vocab = shape.vocab
    points, flops = [], []
    for b in batch_sizes:
        prompts = torch.randint(0, vocab, (b, context), generator=generator).tolist()
        runner.prefill(prompts, capacity=context + max(sizes))
        for n in sizes:
            trees = [_tree(p[-1], n, vocab, generator) for p in prompts]

            def step(trees: list[DraftTree] = trees) -> None:
                prepared = runner.prepare(trees)
                argmax = torch.zeros_like(prepared.tokens)  # acceptance cost does not depend on the values
                greedy_accept(prepared.tokens, prepared.parents, prepared.depths, prepared.valid,
                              prepared.ancestors, argmax)

            prepared = runner.prepare(trees)
            runner.forward(prepared)  # warm-up, untimed
            step()
            verify_s = _timed(lambda prepared=prepared: runner.forward(prepared), runner.device, repeats)
            bookkeeping_s = _timed(step, runner.device, repeats)
            points.append({"tokens": n, "batch": b, "verify_s": verify_s, "bookkeeping_s": bookkeeping_s})
            flops.append(shape.flops(n, b, context))
            if progress is not None:
                progress()
    bandwidth = copy_bandwidth(runner.device, repeats)
    device = f"{runner.device} ({torch.get_num_threads()} threads)" if runner.device.type == "cpu" else str(runner.device)
    profile = fit_profile(points, flops, shape.overhead_units(), bandwidth, device)
    return {
        "target": runner.name, "identity": shape.identity(), "device": device, "dtype": str(runner.dtype),
        "context": context, "points": points, "profile": profile.to_dict(),
        "meta": {"repeats": repeats, "tree": f"complete {FANOUT}-ary", "torch": torch.__version__},
    }
