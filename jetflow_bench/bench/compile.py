"""Does `--compile` (or `--graphs`) pay on this machine? Eager vs static-shape target, paired in one run.

Two runners share one model's weights, one eager and one at static shapes, compiled by Inductor or
recorded as CUDA graphs (`jetflow_bench.engine.compiled`); "compiled" below means either.

* Forwards: for every batch size both prefill the same random context, then one verify step of
  each tree size N — `prepare` + `forward`, N = 1 being the AR step — is timed round-robin over
  sizes and runners, so machine load falls on all alike; each point keeps its median.
* Decodes: each arm (AR, then every drafter at every budget) decodes the same prompts on both
  runners, back to back in alternating order; tokens/s from the engine's wall clock and the
  per-step drafting and verify means. A learned arm is built twice from one checkpoint: on the
  eager runner its head runs eager, on the compiled one its drafting forwards are compiled too
  (`drafters.head_cache.StaticHead`), so the drafting columns compare eager and compiled heads.

Compilation happens in `TargetRunner.warm_up` and `Drafter.warm_up`, whose seconds are reported
on their own (target and heads apart) and are in no timed number.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.loop import BatchResult, cache_capacity, generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.projection.measure import complete_tree, interleaved


@dataclass(frozen=True)
class ForwardPair:
    batch: int
    tokens: int  # tree size N (1 = the AR step)
    eager_ms: float  # median of the repeats
    compiled_ms: float

    @property
    def speedup(self) -> float:
        """eager / compiled time: > 1 means compiling pays."""
        return self.eager_ms / self.compiled_ms


@dataclass(frozen=True)
class DecodePair:
    arm: str
    budget: int
    batch: int
    eager_tok_s: float  # median over the pairs
    compiled_tok_s: float
    eager_draft_ms: float  # mean drafting per verify step (propose + observe)
    compiled_draft_ms: float
    eager_verify_ms: float  # mean target forward per verify step
    compiled_verify_ms: float
    same_tokens: bool  # greedy outputs identical in every pair

    @property
    def speedup(self) -> float:
        """compiled / eager tokens per second."""
        return self.compiled_tok_s / self.eager_tok_s


def compare_forwards(
    eager: TargetRunner, compiled: TargetRunner, sizes: Sequence[int], batch_sizes: Sequence[int], context: int,
    repeats: int, seed: int = 0,
) -> tuple[list[ForwardPair], float]:
    """Verify-step times at every (batch, N), and the seconds the compiled side spent compiling."""
    generator = torch.Generator().manual_seed(seed)
    vocab = eager.model.config.vocab_size
    rows, compile_s = [], 0.0
    for b in batch_sizes:
        prompts = torch.randint(0, vocab, (b, context), generator=generator).tolist()
        capacity = context + max(compiled.tree_width(n) for n in sizes)
        compile_s += compiled.warm_up(b, max(sizes), capacity)
        fns: list[Callable[[], object]] = []
        for runner in (eager, compiled):
            runner.prefill(prompts, capacity)
        for n in sizes:
            trees = [complete_tree(p[-1], n, vocab, generator) for p in prompts]
            fns += [lambda r=runner, t=trees: r.forward(r.prepare(t)) for runner in (eager, compiled)]
        interleaved(fns, eager.device, 1)  # warm-up, untimed
        samples = interleaved(fns, eager.device, repeats)
        for k, n in enumerate(sizes):
            e, c = (1e3 * statistics.median(s) for s in samples[2 * k : 2 * k + 2])
            rows.append(ForwardPair(b, n, e, c))
        for runner in (eager, compiled):
            runner.release()
    return rows, compile_s


def _per_step_ms(result: BatchResult, field: str) -> float:
    steps = list({s.batch_step: s for s in result.steps}.values())  # one record per batched forward
    return 1e3 * sum(getattr(s, field) for s in steps) / len(steps)


@dataclass(frozen=True)
class DecodeArm:
    label: str
    budget: int
    eager: Drafter | None  # built on the eager runner; None = AR
    compiled: Drafter | None  # the same arm built on the compiled runner (its head compiled)


def compare_decodes(
    eager: TargetRunner, compiled: TargetRunner, prompts: Sequence[Sequence[int]], stop: StopRule,
    arms: Sequence[DecodeArm], pairs: int,
) -> tuple[list[DecodePair], float, float]:
    """Each arm decoded ``pairs`` times on both runners, alternating which goes first; returns the
    pairs and the compile seconds of the target's decode shapes and of the heads."""
    rows, target_s, heads_s = [], 0.0, 0.0
    for arm in arms:
        budget, sides = arm.budget, {"eager": (eager, arm.eager), "compiled": (compiled, arm.compiled)}
        capacity = cache_capacity(max(len(p) for p in prompts), stop.max_new_tokens, compiled.tree_width(budget))
        target_s += compiled.warm_up(len(prompts), budget, capacity, arm.compiled.taps if arm.compiled else ())
        heads_s += arm.compiled.warm_up(len(prompts), budget, capacity) if arm.compiled else 0.0
        for runner, drafter in sides.values():
            generate(runner, prompts, stop, budget=budget, drafter=drafter)  # warm-up, untimed
        runs: dict[str, list[BatchResult]] = {"eager": [], "compiled": []}
        for k in range(pairs):
            order = list(sides.items())
            for side, (runner, drafter) in order if k % 2 == 0 else order[::-1]:
                runs[side].append(generate(runner, prompts, stop, budget=budget, drafter=drafter))
        rate = {side: statistics.median(sum(len(r.output_tokens) for r in res.requests) / res.wall_s for res in rs)
                for side, rs in runs.items()}
        mean = {(side, f): statistics.fmean(_per_step_ms(res, f) for res in rs)
                for side, rs in runs.items() for f in ("draft_s", "verify_s")}
        same = all([r.output_tokens for r in e.requests] == [r.output_tokens for r in c.requests]
                   for e, c in zip(runs["eager"], runs["compiled"], strict=True))
        rows.append(DecodePair(arm.label, budget, len(prompts), rate["eager"], rate["compiled"], mean["eager", "draft_s"],
                               mean["compiled", "draft_s"], mean["eager", "verify_s"], mean["compiled", "verify_s"], same))
    return rows, target_s, heads_s
