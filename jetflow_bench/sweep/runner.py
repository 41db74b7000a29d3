"""Running one cell: warm up, decode every prompt batch, and return raw, tidy rows.

It drives any `Engine` (`jetflow_bench.sweep.engines`); the rows it returns are engine-neutral.
Each decoded batch can be kept in the cell's journal (`jetflow_bench.sweep.journal`), so a cell
killed midway decodes only its missing batches when the sweep is run again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from drafters import Drafter
from jetflow_bench.engine.loop import BatchResult, NodeBlock, RequestResult, StepRecord
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.sweep.engines import Engine
from jetflow_bench.sweep.grid import Cell

if TYPE_CHECKING:
    from jetflow_bench.budget_policy import BudgetPolicy
    from jetflow_bench.engine.loop import MarginalBlock, RankBlock
    from jetflow_bench.sweep.journal import CellJournal


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
    wall_s: float  # the batches' timed decodes, summed (warm-ups excluded)
    peak_memory_bytes: int
    started: float  # unix time
    finished: float
    nodes: list[tuple[int, NodeBlock]] = field(default_factory=list)  # (global request id, verified tree)
    resumed: dict[str, int] = field(default_factory=dict)  # earlier session -> batches of it reused
    marginals: list[tuple[int, MarginalBlock]] = field(default_factory=list)  # (global request id, pass-1 children)
    replay_tree: dict | None = None  # the drafter's `replay_tree` options; None: its trees do not replay
    ranks: list[tuple[int, RankBlock]] = field(default_factory=list)  # (global request id, emitted tokens' ranks)


@dataclass
class DecodedBatch:
    """One prompt batch of a cell as the engine returned it, with the clock and session it ran under."""

    index: int  # position among the cell's batches
    requests: list[int]  # the batch's global request ids, to check a reload pairs the same prompts
    result: BatchResult
    wall_s: float  # this batch's timed decode (compile warm-ups excluded)
    peak_memory_bytes: int  # the engine's peak since this session's warm-up, read after this batch
    started: float  # unix time this batch started
    session: str  # the sweep session that decoded it


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
    journal: CellJournal | None = None,
) -> CellRun:
    """Decode all ``prompts`` for ``cell``; the first batch is first run once untimed (warm-up).

    A cell whose budget is the per-step policy warms up at its largest candidate, then gets one
    policy (`BudgetPolicy`, priced on this device, untimed) whose calibration carries over the
    cell's prompt batches.

    Each prompt samples (at temperature > 0) with the stream of its suite-wide request id, so every
    arm, batch size and repeat draws the same numbers for it. The engine resets the drafter's per-request state at every batch (``Drafter.reset``). Step
    rows get cell-wide ``batch_step`` indices, so that rows of one batched forward — and only
    those — share an index (metrics sum each forward's time once).

    With a ``journal``, batches it holds are reused instead of decoded, and every batch decoded
    here is written to it (outside the timed region) before the next one starts.
    """
    chunks = batches(prompts, cell.batch_size)
    ids = [[p.request for p in chunk] for chunk in chunks]
    done = journal.load(ids) if journal is not None else {}
    policy = None
    if len(done) < len(chunks):
        warm_stop = _stop_of(chunks[0])
        warm_stop = StopRule(min(warmup_tokens, warm_stop.max_new_tokens), warm_stop.eos_token_ids)
        engine.generate([p.tokens for p in chunks[0]], warm_stop, cell.budget.nodes, drafter, sampling=sampling,
                        request_ids=ids[0])
        if cell.budget.policy:
            context = round(sum(len(p.tokens) for p in prompts) / len(prompts))
            policy = engine.budget_policy(cell.budget.sizes, cell.batch_size, context)
        engine.reset_peak_memory()
    steps: list[tuple[int, StepRecord]] = []
    nodes: list[tuple[int, NodeBlock]] = []
    marginals: list[tuple[int, MarginalBlock]] = []
    ranks: list[tuple[int, RankBlock]] = []
    outputs: dict[int, RequestResult] = {}
    offset = 0  # cell-wide batch_step of the current chunk's first forward
    decoded: list[DecodedBatch] = []
    engine.synchronize()
    for index, chunk in enumerate(chunks):
        batch = done.get(index) or _decode(engine, cell, chunk, ids[index], index, drafter, sampling, policy, journal)
        result = batch.result
        for record in result.steps:
            steps.append((ids[index][record.request], replace(record, batch_step=record.batch_step + offset)))
        nodes.extend((ids[index][block.request], block) for block in result.nodes)
        marginals.extend((ids[index][block.request], block) for block in result.marginals)
        ranks.extend((ids[index][block.request], block) for block in result.ranks)
        offset += 1 + max((r.batch_step for r in result.steps), default=-1)
        for res in result.requests:
            outputs[ids[index][res.request]] = res
        decoded.append(batch)
        if progress is not None:
            progress(len(chunk), sum(len(r.output_tokens) for r in result.requests))
    resumed = dict(Counter(batch.session for batch in done.values()))
    peak = max(b.peak_memory_bytes for b in decoded)  # each read after its batch: this session's peak is the last
    replay = drafter.replay_tree() if isinstance(drafter, Drafter) else None  # another engine's arms do not replay
    return CellRun(steps, outputs, sum(b.wall_s for b in decoded), peak, min(b.started for b in decoded), time.time(),
                   nodes, resumed, marginals, None if replay is None else asdict(replay), ranks)


def _decode(
    engine: Engine, cell: Cell, chunk: list[Prompt], requests: list[int], index: int, drafter: Drafter | None,
    sampling: SamplingParams, policy: BudgetPolicy | None, journal: CellJournal | None,
) -> DecodedBatch:  # fmt: skip
    """Decode one batch under the clock (compile warm-ups it met kept out), and journal it."""
    started = time.time()
    t0 = time.perf_counter()
    result = engine.generate([p.tokens for p in chunk], _stop_of(chunk), cell.budget.nodes, drafter,
                             sampling=sampling, request_ids=requests, policy=policy)
    wall_s = time.perf_counter() - t0 - result.compile_s  # generate() synchronises before its last clock read
    batch = DecodedBatch(index, requests, result, wall_s, engine.peak_memory_bytes(), started,
                         journal.session if journal is not None else "")
    if journal is not None:
        journal.save(batch)
    return batch
