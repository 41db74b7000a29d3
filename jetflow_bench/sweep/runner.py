"""The pieces a sweep times a cell with: warm up, decode one prompt batch, assemble the batches.

They drive any `Engine` (`jetflow_bench.sweep.engines`); the rows they return are engine-neutral.
The driver (`jetflow_bench.sweep.driver`) interleaves the batches of a pairing group's cells and
keeps each decoded batch in its cell's journal (`jetflow_bench.sweep.journal`), so a cell killed
midway decodes only its missing batches when the sweep is run again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.loop import NodeBlock, RequestResult, StepRecord
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.sweep.engines import Engine
from jetflow_bench.sweep.grid import Cell
from jetflow_bench.sweep.records import CellRun, DecodedBatch, Prompt

if TYPE_CHECKING:
    from jetflow_bench.core.budget_policy import BudgetPolicy
    from jetflow_bench.engine.loop import MarginalBlock, RankBlock


def batches(prompts: Sequence[Prompt], batch_size: int) -> list[list[Prompt]]:
    """Consecutive chunks of ``batch_size``; every arm at this batch size sees the same chunks."""
    return [list(prompts[i : i + batch_size]) for i in range(0, len(prompts), batch_size)]


def _stop_of(chunk: Sequence[Prompt]) -> StopRule:
    stops = {p.stop for p in chunk}
    if len(stops) != 1:
        raise RuntimeError("a prompt batch mixes stop rules; the engine takes one stop rule per batch")
    return stops.pop()


def warm_up(
    engine: Engine, cell: Cell, prompts: Sequence[Prompt], drafter: Drafter | None, warmup_tokens: int,
    sampling: SamplingParams = GREEDY,
) -> BudgetPolicy | None:
    """Decode the cell's first batch once, untimed and cut to ``warmup_tokens``; returns its budget
    policy when the cell's budget is the per-step policy (None otherwise).

    A policy cell warms up at its largest candidate, then gets one policy (`BudgetPolicy`, priced on
    this device, untimed) whose calibration carries over the cell's prompt batches.
    """
    chunk = batches(prompts, cell.batch_size)[0]
    stop = _stop_of(chunk)
    stop = StopRule(min(warmup_tokens, stop.max_new_tokens), stop.eos_token_ids)
    engine.generate([p.tokens for p in chunk], stop, cell.budget.nodes, drafter, sampling=sampling,
                    request_ids=[p.request for p in chunk])
    if not cell.budget.policy:
        return None
    context = round(sum(len(p.tokens) for p in prompts) / len(prompts))
    return engine.budget_policy(cell.budget.sizes, cell.batch_size, context)


def decode_batch(
    engine: Engine, cell: Cell, chunk: list[Prompt], index: int, drafter: Drafter | None, session: str,
    sampling: SamplingParams = GREEDY, policy: BudgetPolicy | None = None,
) -> DecodedBatch:
    """Decode one prompt batch under the clock (compile warm-ups it met kept out).

    Each prompt samples (at temperature > 0) with the stream of its suite-wide request id, so every
    arm, batch size and repeat draws the same numbers for it. The engine resets the drafter's
    per-request state at every batch (``Drafter.reset``). The memory peak is reset before the clock
    starts and read after it stops, so each batch's peak is its own.
    """
    requests = [p.request for p in chunk]
    engine.reset_peak_memory()
    engine.synchronize()
    started = time.time()
    t0 = time.perf_counter()
    result = engine.generate([p.tokens for p in chunk], _stop_of(chunk), cell.budget.nodes, drafter,
                             sampling=sampling, request_ids=requests, policy=policy)
    wall_s = time.perf_counter() - t0 - result.compile_s  # generate() synchronises before its last clock read
    return DecodedBatch(index, requests, result, wall_s, engine.peak_memory_bytes(), started, session)


def request_times(batch: DecodedBatch, field: str) -> list[float]:
    """``field`` (decode_s or ttft_s) of each request of ``batch``, in batch order."""
    return [getattr(r, field) for r in sorted(batch.result.requests, key=lambda r: r.request)]


def cell_run(decoded: Sequence[DecodedBatch], session: str, drafter: Drafter | None) -> CellRun:
    """A finished cell's raw output from its batches in order (decoded in ``session`` or reused) by
    ``drafter``, whose tree options it keeps when its trees replay (`Drafter.replay_tree`).

    Step rows get cell-wide ``batch_step`` indices, so that rows of one batched forward — and only
    those — share an index (metrics sum each forward's time once). Each request keeps the session
    and start time of its batch and the batch's paired timings (`DecodedBatch.paired`).
    """
    steps: list[tuple[int, StepRecord]] = []
    nodes: list[tuple[int, NodeBlock]] = []
    marginals: list[tuple[int, MarginalBlock]] = []
    ranks: list[tuple[int, RankBlock]] = []
    outputs: dict[int, RequestResult] = {}
    paired: dict[int, dict[str, Any]] = {}
    offset = 0  # cell-wide batch_step of the current batch's first forward
    for batch in decoded:
        result, ids = batch.result, batch.requests
        for record in result.steps:
            steps.append((ids[record.request], replace(record, batch_step=record.batch_step + offset)))
        nodes.extend((ids[block.request], block) for block in result.nodes)
        marginals.extend((ids[block.request], block) for block in result.marginals)
        ranks.extend((ids[block.request], block) for block in result.ranks)
        offset += 1 + max((r.batch_step for r in result.steps), default=-1)
        for res in result.requests:
            outputs[ids[res.request]] = res
        for k, request in enumerate(ids):
            paired[request] = {"session": batch.session, "batch_started": batch.started,
                               **{column: values[k] for column, values in batch.paired.items()}}
    resumed = dict(Counter(b.session for b in decoded if b.session != session))
    replay = drafter.replay_tree() if isinstance(drafter, Drafter) else None  # another engine's arms do not replay
    return CellRun(steps, outputs, sum(b.wall_s for b in decoded), max(b.peak_memory_bytes for b in decoded),
                   min(b.started for b in decoded), time.time(), nodes, resumed, marginals,
                   None if replay is None else asdict(replay), ranks, paired)
