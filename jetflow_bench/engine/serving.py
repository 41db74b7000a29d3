"""Continuous batching: requests arrive over time and join the running batch at step boundaries.

`serve` is the serving counterpart of `loop.generate` and runs the same step
(`loop._speculative_step`: draft, verify, accept, commit). At every step boundary the requests that
have arrived are admitted, up to ``max_concurrency`` in flight: their prompts run as a prefill of
their own (`TargetRunner.admit`), their first tokens are drawn, the drafter learns their prompts
(`Drafter.admit`), and from the next step on they decode together with the running rows. A request
that finishes leaves in the step it finished: its KV rows and its drafter state are dropped then.

Nothing about a request's tokens depends on who it shares a step with: token t of request r is
drawn with U[r, t] (`sampling`), greedy acceptance keeps the target's argmax, and stop rules read
only the request's own tokens. So each request's output is the one it gets decoded alone
(`tests/engine/test_serving.py` checks it, arm by arm).

Arrivals: open loop (``arrivals``: seconds after the start at which each request is sent, e.g. a
Poisson process; a request that finds every slot taken waits, and that wait is part of its TTFT,
as in a server's queue) or closed loop (``arrivals`` None: a request is sent when a slot frees,
so ``max_concurrency`` requests are always in flight). Every token a request receives is stamped:
its first token when its prefill's draw is done, then each step's emitted tokens (a "chunk", what
a streaming server sends at once) when that step ends. `jetflow_bench.measure.metrics` turns the stamps
into TTFT, TPOT, ITL and E2E latency.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from jetflow_bench.core.budget_policy import BudgetPolicy
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.loop import (
    BatchResult,
    _Batch,
    _shrink,
    _speculative_step,
    batch_result,
    cache_capacity,
    check_generate_args,
)
from jetflow_bench.engine.meter import Clock, StepMeter
from jetflow_bench.engine.sampling import GREEDY, RandomStreams, SamplingParams, draw
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner


@dataclass
class RequestTimeline:
    """When one request was sent and when each of its chunks arrived (seconds after the run's start)."""

    request: int
    sent_s: float  # open loop: its arrival; closed loop: when a slot freed for it
    admitted_s: float  # the step boundary that prefilled it (>= sent_s: a full engine queues it)
    joined_running: bool  # admitted while other requests were decoding (continuous batching at work)
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens): its first token, then each step's


@dataclass
class ServeResult:
    batch: BatchResult  # requests, step records and wall time as `generate` gives them
    timelines: list[RequestTimeline]  # in request order


def serve(
    target: TargetRunner,
    prompts: Sequence[Sequence[int]],
    stop: StopRule,
    arrivals: Sequence[float] | None = None,
    max_concurrency: int | None = None,
    budget: int = 1,
    drafter: Drafter | None = None,
    sampling: SamplingParams = GREEDY,
    request_ids: Sequence[int] | None = None,
    policy: BudgetPolicy | None = None,
    profile: bool = False,
) -> ServeResult:
    """Decode ``prompts`` as requests that arrive over time (module docstring); the arguments
    after ``max_concurrency`` are `loop.generate`'s. ``arrivals``: non-decreasing send times in
    seconds after the start, one per prompt (None: closed loop); ``max_concurrency``: requests in
    flight at most (None: every arrived request)."""
    budget, ids = check_generate_args(prompts, budget, drafter, request_ids, policy)
    n = len(prompts)
    if arrivals is not None and (len(arrivals) != n or any(b < a for a, b in zip(arrivals, arrivals[1:], strict=False))):
        raise ValueError(f"arrivals must be {n} non-decreasing times, one per prompt")
    if max_concurrency is not None and max_concurrency < 1:
        raise JfbenchError(f"--max-concurrency {max_concurrency}: use at least 1 request in flight")
    limit = max_concurrency or n
    clock = Clock(target.device, split=profile or policy is not None)
    capacity = cache_capacity(max(len(p) for p in prompts), stop.max_new_tokens, target.tree_width(budget))
    streams = RandomStreams(sampling.seed, ids, stop.max_new_tokens + budget, device=target.device)
    batch = _Batch(prompts, stop, clock, sampling, streams)
    batch.active = []
    start = batch.start
    offsets = [0.0] * n if arrivals is None else list(arrivals)
    timelines: list[RequestTimeline | None] = [None] * n
    meter = StepMeter(clock, drafter, policy, target.shape)
    waiting = 0  # the next request not yet admitted
    if drafter is not None:
        drafter.reset([])
    try:
        while waiting < n or batch.active:
            now = clock()
            joining = []
            while waiting < n and len(batch.active) + len(joining) < limit and start + offsets[waiting] <= now:
                joining.append(waiting)
                waiting += 1
            if joining:
                for i in joining:
                    batch.sent[i] = now if arrivals is None else start + offsets[i]
                    timelines[i] = RequestTimeline(i, batch.sent[i] - start, now - start, bool(batch.active))
                _admit(target, batch, joining, drafter, capacity, timelines, start)
            elif not batch.active:  # idle until the next arrival
                time.sleep(max(0.0, start + offsets[waiting] - now))
                continue
            if batch.active:
                records = _speculative_step(target, batch, budget, drafter, meter)
                stamp = clock() - start
                for record in records:
                    if record.emitted:
                        timelines[record.request].chunks.append((stamp, record.emitted))
            if not batch.active:  # everyone left: the next admission starts a fresh batch
                target.release()
                if drafter is not None:
                    drafter.reset([])
    finally:
        target.release()
    return ServeResult(batch_result(batch, meter, clock() - start), [t for t in timelines if t is not None])


def _admit(
    target: TargetRunner, batch: _Batch, joining: list[int], drafter: Drafter | None, capacity: int,
    timelines: list[RequestTimeline | None], start: float,
) -> None:
    """Prefill the requests ``joining``, draw their first tokens and add them after the running rows."""
    prompts = [batch.seqs[i].tokens[: batch.seqs[i].prompt_len] for i in joining]
    out = target.admit(prompts, capacity, drafter.taps if drafter else ())
    rows = torch.tensor(joining, device=batch.streams.u.device)
    first_u = batch.streams.at(rows, torch.zeros(len(joining), 1, dtype=torch.long, device=rows.device))[:, 0]
    first = draw(out.logits[:, 0], first_u, batch.sampling).tolist()
    stamp = batch.clock()
    for i, token in zip(joining, first, strict=True):
        batch.seqs[i].tokens.append(token)
        batch.first_token_at[i] = stamp
        timelines[i].chunks.append((stamp - start, 1))
    running = len(batch.active)
    batch.active = batch.active + joining
    keep = batch.retire_finished()  # a request may end at its first token
    _shrink(target, batch, keep)
    stay = [row - running for row in keep if row >= running]  # newcomers that go on decoding
    if drafter is not None and stay:
        features = None if out.hidden is None else [out.hidden[j, : len(prompts[j])] for j in stay]
        drafter.admit([batch.seqs[joining[j]] for j in stay], features)
        drafter.take_cost(len(stay))  # the prompt's context features belong to prefill
