"""The records a cell's timing produces: its prompts, each decoded prompt batch, the finished cell.

Their own module, so the runner that makes them and the journal that keeps batches on disk
(`jetflow_bench.sweep.journal`) both read them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jetflow_bench.engine.loop import (
    BatchResult,
    MarginalBlock,
    NodeBlock,
    RankBlock,
    RequestResult,
    StepRecord,
)
from jetflow_bench.engine.serving import RequestTimeline
from jetflow_bench.engine.stopping import StopRule


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
    paired: dict[int, dict[str, Any]] = field(default_factory=dict)  # request -> session, batch start, paired times
    timelines: dict[int, RequestTimeline] = field(default_factory=dict)  # load cells: global request id -> its stamps
    base_wall_s: float | None = None  # load cells: the wall time of plain decoding's serving run paired with it


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
    # Timings of the same prompts taken in the same round of the same session (`PAIRED_COLUMNS`:
    # the baseline arm's and the AR baseline's second, A/A copy), one value per request in batch
    # order; empty in a τ-only run, which claims no speed-up.
    paired: dict[str, list[float]] = field(default_factory=dict)


# A request's timings paired with it in its round: its baseline arm's decode (AR for the AR cell
# itself) and the AR baseline's A/A copy. Speed-ups and the noise floor divide these (metrics).
PAIRED_COLUMNS = ("base_decode_s", "base_ttft_s", "aa_decode_s", "aa_ttft_s")
