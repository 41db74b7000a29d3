"""`jfbench bench verify-cost`: time the target's verify forward against tree size on this device.

For every batch size b: prefill b random prompts of `context` tokens, then for every tree size N
time (a) the engine's per-step work — `TargetRunner.prepare` (padding, tree masks, slots) and
greedy acceptance on the forward's argmax — and (b) the target forward itself, exactly the split the
engine records as `other_s` / `verify_s`. The trees are complete 4-ary trees (a plausible draft
shape; the forward's cost depends on N, not on the shape). Nothing is committed, so the cache stays
at `context` tokens and each forward overwrites the same slots. Warm-up forwards are not timed; the
sizes are timed round-robin and each point keeps the median (and the minimum) of its repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from jetflow_bench.core.runtime import synchronize
from jetflow_bench.engine.acceptance import accept_tree
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.projection.shapes import ModelShape
from jetflow_bench.projection.verify_cost import fit_profile

FANOUT = 4  # children per node of the timed trees
COPY_BYTES = 1 << 27  # 128 MiB buffer for the bandwidth probe (larger than any CPU cache)


def complete_tree(root: int, size: int, vocab: int, generator: torch.Generator) -> DraftTree:
    tokens = [root, *torch.randint(0, vocab, (size - 1,), generator=generator).tolist()]
    return DraftTree(tokens, [-1, *[(i - 1) // FANOUT for i in range(1, size)]])


def _once(fn: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def interleaved(fns: Sequence[Callable[[], object]], device: torch.device, repeats: int) -> list[list[float]]:
    """Seconds of `repeats` calls of each fn, taken round-robin (fn 0, fn 1, ..., fn 0, ...) so that
    load from other processes on a shared machine falls on every point alike."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            samples[k].append(_once(fn, device))
    return samples


def copy_bandwidth(device: torch.device, repeats: int) -> float:
    """Bytes/s of a large tensor copy (read + write counted)."""
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2 * COPY_BYTES / statistics.median(interleaved([lambda: dst.copy_(src)], device, repeats)[0])


def measure(
    runner: TargetRunner, shape: ModelShape, sizes: Sequence[int], batch_sizes: Sequence[int], context: int,
    repeats: int, progress: Callable[[], None] | None = None, seed: int = 0,
) -> dict:
    """The calibration file's content (see jetflow_bench.projection.verify_cost)."""
    generator = torch.Generator().manual_seed(seed)
    vocab = shape.vocab
    points, flops = [], []
    for b in batch_sizes:
        prompts = torch.randint(0, vocab, (b, context), generator=generator).tolist()
        runner.prefill(prompts, capacity=context + max(sizes))
        try:  # each batch size is its own live batch: released before the next one's prefill
            verify, bookkeeping = _time_batch(runner, prompts, sizes, vocab, generator, repeats)
        finally:
            runner.release()
        for n, v, k in zip(sizes, verify, bookkeeping, strict=True):
            points.append({"tokens": n, "batch": b, "verify_s": statistics.median(v), "verify_min_s": min(v),
                           "bookkeeping_s": statistics.median(k)})
            flops.append(shape.flops(n, b, context))
        if progress is not None:
            progress()
    bandwidth = copy_bandwidth(runner.device, repeats)
    device = str(runner.device)
    if runner.device.type == "cpu":
        device += f" ({torch.get_num_threads()} threads)"
    elif runner.device.type == "cuda":  # the model, so a projection's hardware column says which GPU priced it
        device += f" ({torch.cuda.get_device_name(runner.device)})"
    profile = fit_profile(points, flops, shape.overhead_units(), bandwidth, device)
    return {
        "target": runner.name, "identity": shape.identity(), "device": device, "dtype": str(runner.dtype),
        "context": context, "points": points, "profile": profile.to_dict(),
        "meta": {"repeats": repeats, "tree": f"complete {FANOUT}-ary", "torch": torch.__version__},
    }


def _time_batch(
    runner: TargetRunner, prompts: list[list[int]], sizes: Sequence[int], vocab: int, generator: torch.Generator,
    repeats: int,
) -> tuple[list[list[float]], list[list[float]]]:
    """Seconds of the forward and of the per-step work around it, for each tree size, on the live batch."""
    forwards, steps = [], []
    for n in sizes:
        trees = [complete_tree(p[-1], n, vocab, generator) for p in prompts]
        prepared = runner.prepare(trees)

        def step(trees: list[DraftTree] = trees) -> None:
            batch = runner.prepare(trees)
            argmax = torch.zeros_like(batch.tokens)  # acceptance cost does not depend on the values
            accept_tree(batch.tokens, batch.parents, batch.depths, batch.valid, batch.ancestors, argmax)

        forwards.append(lambda prepared=prepared: runner.forward(prepared))
        steps.append(step)
    interleaved(forwards + steps, runner.device, 1)  # warm-up, untimed
    return interleaved(forwards, runner.device, repeats), interleaved(steps, runner.device, repeats)
