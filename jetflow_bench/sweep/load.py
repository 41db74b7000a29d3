"""The load axis (``--load``): a cell that serves its suite's prompts as requests arriving over time.

A load level is ``poisson:RATE`` (open loop: requests sent at the times of a Poisson process of
RATE requests per second, drawn with the run's seed, the load and the repeat, so every arm at a
level sees the same arrival times; ``poisson:inf`` sends all at once) or ``concurrency:N`` (closed
loop: N requests in flight, the next sent when one finishes). The cell's batch size is the
engine's capacity: at most that many requests decode together (`engine.serving.serve`), the rest
wait in its queue (their TTFT counts the wait). A load cell is resumable as a whole: it is one
serving run, so it is decoded again if interrupted, never in parts. The sweep times a level's
cells one after another, plain decoding among them, and pairs each arm with plain decoding's run
of the same session (`paired_with`; `driver.GroupRunner`): its engine's own plain decoding where
the grid has it (a vLLM arm's: ``vllm:none`` at the same load), else jfbench's AR, served twice
(the second run, its A/A copy, gives the noise floor at that load). ``--engine
vllm`` serves a vLLM arm's requests from the suite's own client with these same arrival times or
closed loop (`vllm_engine.VLLMEngine.serve`), so its latencies read as jfbench's.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace

import numpy as np

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.measure.serving import request_latency
from jetflow_bench.sweep.engines import Engine
from jetflow_bench.sweep.grid import Cell
from jetflow_bench.sweep.records import CellRun, DecodedBatch, Prompt
from jetflow_bench.sweep.runner import _stop_of, cell_run, warm_up

KINDS = ("poisson", "concurrency")


def parse_loads(text: str) -> tuple[str, ...]:
    """'poisson:1,2,inf,concurrency:4' -> ('poisson:1', 'poisson:2', 'poisson:inf', 'concurrency:4'):
    a bare number continues the kind before it; order kept, duplicates dropped."""
    loads: list[str] = []
    kind = None
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        if ":" in part:
            kind, _, part = part.partition(":")
        if kind not in KINDS:
            raise JfbenchError(f"--load {text!r}: write poisson:RATE,... (requests/s, inf = all at once) or concurrency:N,...")
        level = _level(kind, part, text)
        canonical = f"{kind}:{level:g}" if math.isfinite(level) else f"{kind}:inf"
        if canonical not in loads:
            loads.append(canonical)
    if not loads:
        raise JfbenchError(f"--load {text!r}: name at least one level, e.g. --load poisson:1,4 or --load concurrency:1,4")
    return tuple(loads)


def _level(kind: str, value: str, text: str) -> float:
    try:
        level = float(value)
    except ValueError:
        level = -1.0
    if kind == "concurrency" and (not level.is_integer() or level < 1 or math.isinf(level)):
        raise JfbenchError(f"--load {text!r}: concurrency:{value} must be a whole number of requests >= 1")
    if kind == "poisson" and not level > 0:
        raise JfbenchError(f"--load {text!r}: poisson:{value} must be a rate > 0 requests/s (or inf)")
    return level


def split_load(load: str) -> tuple[str, float]:
    """'poisson:2' -> ('poisson', 2.0)."""
    kind, _, level = load.partition(":")
    return kind, float(level)


def arrivals(load: str, n: int, seed: int, repeat: int) -> list[float] | None:
    """Send times (seconds after the start) of ``n`` requests at ``load``; None for a closed loop."""
    kind, level = split_load(load)
    if kind == "concurrency":
        return None
    if math.isinf(level):
        return [0.0] * n
    key = hashlib.sha256(f"jfbench-arrivals:{seed}:{load}:{repeat}".encode()).digest()
    gaps = np.random.default_rng(int.from_bytes(key[:8], "little")).exponential(1.0 / level, size=n)
    return [0.0, *np.cumsum(gaps[1:]).tolist()][:n]  # the first request opens the run


def check_load_grid(loads: tuple[str, ...], batch_sizes: tuple[int, ...], compile: bool | str | None) -> None:
    """Refuse, before anything runs, a load grid the engine cannot serve (every engine serves: `Engine.serve`)."""
    if not loads:
        return
    if compile:
        raise JfbenchError("--load admits requests into running batches, which the static-shape engine cannot: drop --compile / --graphs")
    for load in loads:
        kind, level = split_load(load)
        if kind == "concurrency" and level > min(batch_sizes):
            raise JfbenchError(f"--load {load}: more requests in flight than the engine decodes together "
                               f"(--batch-sizes {min(batch_sizes)}): raise --batch-sizes to at least {level:g}")


def run_load_cell(
    engine: Engine, cell: Cell, prompts: list[Prompt], drafter: Drafter | None, warmup_tokens: int, session: str,
    sampling: SamplingParams = GREEDY,
) -> CellRun:
    """Serve every prompt of ``cell`` at its load in ``session``, after an untimed warm-up
    (`runner.warm_up`); the memory peak is reset before the serving run starts, so it is the run's
    own. The run is one batch of the cell (`runner.cell_run`) plus each request's time stamps."""
    stop = _stop_of(prompts)
    ids = [p.request for p in prompts]
    policy = warm_up(engine, cell, prompts, drafter, warmup_tokens, sampling)
    kind, level = split_load(cell.load)
    engine.reset_peak_memory()
    engine.synchronize()
    started = time.time()
    out = engine.serve(
        [p.tokens for p in prompts], stop, arrivals(cell.load, len(prompts), sampling.seed, cell.repeat),
        int(level) if kind == "concurrency" else cell.batch_size, cell.budget.nodes, drafter, sampling=sampling,
        request_ids=ids, policy=policy,
    )
    batch = DecodedBatch(0, ids, out.batch, out.batch.wall_s, engine.peak_memory_bytes(), started, session)
    return replace(cell_run([batch], session, drafter), timelines={ids[t.request]: t for t in out.timelines})


def paired_with(run: CellRun, base: CellRun, twin: CellRun, session: str) -> CellRun:
    """``run`` with each request's pairing columns (`records.PAIRED_COLUMNS`) taken from ``base``,
    plain decoding's serving run at the same load in this ``session`` (its engine's: `GroupRunner.base`),
    and from ``twin``, that run's A/A copy: the same request's TTFT and decode time (E2EL - TTFT,
    as the requests rows keep it), and ``base``'s wall time for the throughput ratio."""
    times = {prefix: {r: request_latency(t.sent_s, t.chunks) for r, t in served.timelines.items()}
             for prefix, served in (("base", base), ("aa", twin))}
    paired = {r: {"session": session, "batch_started": run.started,
                  **{f"{prefix}_{field}": value for prefix, by_request in times.items()
                     for field, value in (("ttft_s", by_request[r]["ttft_s"]),
                                          ("decode_s", by_request[r]["e2el_s"] - by_request[r]["ttft_s"]))}}
              for r in run.outputs}
    return replace(run, paired=paired, base_wall_s=base.wall_s)
