"""Running one cell: warm up, decode every prompt batch, and return raw, tidy rows.

It drives any `Engine` (`jetflow_bench.sweep.engines`); the rows it returns are engine-neutral.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from drafters import Drafter
from jetflow_bench.engine.loop import NodeBlock, RequestResult, StepRecord
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.sweep.engines import Engine
from jetflow_bench.sweep.grid import Cell


@dataclass
class Prompt:
    """One request of a cell: a stable id within its suite plus what the engine decodes."""

    request: int  # position in the suite's request list; pairs arms and repeats
    tokens: list[int]
    stop: StopRule


@dataclass
class CellRun:
    """A finished cell's raw output, before losslessness and scoring."""

    steps: list[tuple[int, StepRecord]]  # (global request id, record with batch_step made cell-wide)
    outputs: dict[int, RequestResult]  # global request id -> result
    wall_s: float  # first timed generate start -> last end (warm-up excluded)
    peak_memory_bytes: int
    started: float  # unix time
    finished: float
    nodes: list[tuple[int, NodeBlock]] = field(default_factory=list)  # (global request id, verified tree)


ProgressFn = Callable[[int, int], None]  # (requests finished, tokens generated) since the last call


def batches(prompts: Sequence[Prompt], batch_size: int) -> list[list[Prompt]]:
    """Consecutive chunks of ``batch_size``; every arm at this batch size sees the same chunks."""
    return [list(prompts[i : i + batch_size]) for i in range(0, len(prompts), batch_size)]


def _stop_of(chunk: Sequence[Prompt]) -> StopRule:
    stops = {p.stop for p in chunk}
    if len(stops) != 1:
        raise RuntimeError("a prompt batch mixes stop rules; the engine takes one stop rule per batch")
    return stops.pop()


def run_cell(
    engine: Engine,
    cell: Cell,
    prompts: Sequence[Prompt],
    drafter: Drafter | None,
    warmup_tokens: int,
    progress: ProgressFn | None = None,
    sampling: SamplingParams = GREEDY,
) -> CellRun:
    """Decode all ``prompts`` for ``cell``; the first batch is first run once untimed (warm-up).

    A cell whose budget is the per-step policy warms up at its largest candidate, then gets one
    policy (`BudgetPolicy`, priced on this device, untimed) whose calibration carries over the
    cell's prompt batches.

    Each prompt samples (at temperature > 0) with the stream of its suite-wide request id, so every
    arm, batch size and repeat draws the same numbers for it. The engine resets the drafter's per-request state at every batch (``Drafter.reset``). Step
    rows get cell-wide ``batch_step`` indices, so that rows of one batched forward — and only
    those — share an index (metrics sum each forward's time once).
    """
    chunks = batches(prompts, cell.batch_size)
    warm_stop = _stop_of(chunks[0])
    warm_stop = StopRule(min(warmup_tokens, warm_stop.max_new_tokens), warm_stop.eos_token_ids)
    budget = cell.budget.nodes
    engine.generate([p.tokens for p in chunks[0]], warm_stop, budget, drafter, sampling=sampling,
                    request_ids=[p.request for p in chunks[0]])
    policy = None
    if cell.budget.policy:
        context = round(sum(len(p.tokens) for p in prompts) / len(prompts))
        policy = engine.budget_policy(cell.budget.sizes, cell.batch_size, context)
    engine.reset_peak_memory()
    steps: list[tuple[int, StepRecord]] = []
    nodes: list[tuple[int, NodeBlock]] = []
    outputs: dict[int, RequestResult] = {}
    started = time.time()
    engine.synchronize()
    t0 = time.perf_counter()
    offset = 0  # cell-wide batch_step of the current chunk's first forward
    compile_s = 0.0  # compiled target: warm-ups a chunk met (a new cache capacity), kept out of wall_s
    for chunk in chunks:
        result = engine.generate([p.tokens for p in chunk], _stop_of(chunk), budget, drafter,
                                 sampling=sampling, request_ids=[p.request for p in chunk], policy=policy)
        for record in result.steps:
            steps.append((chunk[record.request].request, replace(record, batch_step=record.batch_step + offset)))
        nodes.extend((chunk[block.request].request, block) for block in result.nodes)
        offset += 1 + max((r.batch_step for r in result.steps), default=-1)
        compile_s += result.compile_s
        for res in result.requests:
            outputs[chunk[res.request].request] = res
        if progress is not None:
            progress(len(chunk), sum(len(r.output_tokens) for r in result.requests))
    wall_s = time.perf_counter() - t0 - compile_s  # generate() synchronises before its last clock read
    return CellRun(steps, outputs, wall_s, engine.peak_memory_bytes(), started, time.time(), nodes)
