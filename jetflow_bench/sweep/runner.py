"""Running one cell: warm up, decode every prompt batch, and return raw, tidy rows.

The engine is a seam (``--engine``): the sweep only needs `Engine` — load a target, decode a
batch of token-id prompts (greedy or sampled) with an optional drafter, give next-token logits
for the losslessness tie check, and describe itself. ``hf`` is this package's own engine
(`jetflow_bench.engine.loop`); ``vllm`` (`jetflow_bench.integrations.vllm_engine`) registers next to it
without changing the result schema, which is engine-neutral. An engine factory takes the resolved
config, the run folder (for logs) and engine-specific options that are not part of the config hash.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from drafters import DRAFTERS, Drafter
from jetflow_bench.arms import AR_ARM
from jetflow_bench.budget_policy import AUTO_BUDGET, DEFAULT_CANDIDATES, BudgetPolicy
from jetflow_bench.engine import loop as hf_engine
from jetflow_bench.engine.kv_cache import KVCache
from jetflow_bench.engine.loop import BatchResult, NodeBlock, RequestResult, StepRecord
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.errors import JfbenchError
from jetflow_bench.prompts import encode
from jetflow_bench.registry import Registry
from jetflow_bench.runtime import available_memory_bytes, synchronize
from jetflow_bench.sweep.grid import Cell, DrafterSpec, SweepConfig


class Engine(Protocol):
    """What the sweep needs from a decoding engine."""

    name: str
    tokenizer: Any
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]: ...  # prompt text -> ids exactly as the model sees them

    def build_drafter(self, spec: DrafterSpec, checkpoint: Path | None) -> Drafter: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, budget: int, drafter: Drafter | None,
        sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> BatchResult: ...  # sampling: draw token t of request r with the uniform U[(seed, r), t] (`sampling`)

    # Optional (engines that support `--budgets auto`): a fresh per-cell policy priced on this device.
    def budget_policy(self, candidates: Sequence[int], batch_size: int, context: int) -> BudgetPolicy: ...

    def next_token_logits(self, context: list[int]) -> torch.Tensor: ...  # (V,) float32

    def synchronize(self) -> None: ...  # wait for queued device work before a clock read

    def reset_peak_memory(self) -> None: ...

    def peak_memory_bytes(self) -> int: ...

    def describe(self) -> dict[str, Any]: ...

    def label(self, drafter: Drafter | None) -> str: ...  # the `engine` column of a cell run with it

    def baseline_arm(self, drafter: Drafter | None) -> str: ...  # the arm its speed-ups divide by

    def close(self) -> None: ...  # release servers, processes (called once, at the end of a sweep)

    # Optional: `kv_cache_bytes(batch, capacity) -> int`, the target KV cache `generate` would
    # allocate, and `available_memory_bytes() -> int | None`; the sweep checks the grid against
    # them before any cell runs. An engine that manages its own cache pool leaves them out.


class HFEngine:
    """This package's engine: `TargetRunner` + `jetflow_bench.engine.loop.generate`."""

    name = "hf"

    def __init__(self, target: TargetRunner) -> None:
        self.target = target
        self.tokenizer = target.tokenizer
        self.eos_token_ids = target.eos_token_ids

    @classmethod
    def load(cls, target: str, device: str, dtype: str, attention: str = "sdpa") -> HFEngine:
        return cls(TargetRunner.load(target, device, dtype, attention))

    def encode(self, text: str) -> list[int]:
        return encode(self.target, text)

    def build_drafter(self, spec: DrafterSpec, checkpoint: Path | None) -> Drafter:
        return DRAFTERS.get(spec.name).build(self.target, checkpoint=checkpoint, **dict(spec.options))

    def generate(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, budget: int, drafter: Drafter | None,
        sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> BatchResult:
        return hf_engine.generate(self.target, prompts, stop, budget=budget, drafter=drafter, sampling=sampling,
                                  request_ids=request_ids, policy=policy)

    def budget_policy(self, candidates: Sequence[int], batch_size: int, context: int) -> BudgetPolicy:
        """`--budgets auto`: a fresh policy priced by this device's measured verify steps."""
        from jetflow_bench.sweep.auto_budget import cell_policy

        return cell_policy(self.target, candidates, batch_size, context)

    def next_token_logits(self, context: list[int]) -> torch.Tensor:
        """One target forward over ``context`` (a chain); logits of the token after it."""
        out = self.target.score([context])
        return out.logits[0, len(context) - 1].float()  # (V,)

    def synchronize(self) -> None:
        synchronize(self.target.device)

    def reset_peak_memory(self) -> None:
        if self.target.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.target.device)

    def peak_memory_bytes(self) -> int:
        """Device peak since the last reset on GPUs; on CPU the process's resident high-water mark."""
        if self.target.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.target.device))
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale

    def kv_cache_bytes(self, batch: int, capacity: int) -> int:
        """Bytes of the KV cache `generate` allocates for ``batch`` rows of ``capacity`` slots."""
        t = self.target
        return KVCache.bytes_needed(len(t.layers), batch, t.kv_heads, t.head_dim, capacity, t.dtype)

    def available_memory_bytes(self) -> int | None:
        return available_memory_bytes(self.target.device)

    def describe(self) -> dict[str, Any]:
        device = self.target.device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
        return {
            "engine": self.name, "device": str(device), "device_name": name, "dtype": str(self.target.dtype),
            "attention": self.target.attention_backend, "target_class": type(self.target.model).__name__,
        }

    def label(self, drafter: Drafter | None) -> str:
        return self.name

    def baseline_arm(self, drafter: Drafter | None) -> str:
        return AR_ARM

    def close(self) -> None:
        pass


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


EngineFactory = Callable[[SweepConfig, Path, Any], Engine]  # (config, run folder, engine options)
ENGINES: Registry[EngineFactory] = Registry("engine")
ENGINES.register("hf", lambda config, run_dir, options=None: HFEngine.load(config.target, config.device, config.dtype,
                                                                           attention=config.attention))
ENGINES.register("vllm", "jetflow_bench.integrations.vllm_engine:load_engine")


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
    auto_budgets: Sequence[int] = DEFAULT_CANDIDATES,
) -> CellRun:
    """Decode all ``prompts`` for ``cell``; the first batch is first run once untimed (warm-up).

    A cell of budget `AUTO_BUDGET` warms up at the largest of ``auto_budgets``, then gets one
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
    auto = cell.budget == AUTO_BUDGET
    budget = max(auto_budgets) if auto else cell.budget
    engine.generate([p.tokens for p in chunks[0]], warm_stop, budget, drafter, sampling=sampling,
                    request_ids=[p.request for p in chunks[0]])
    policy = None
    if auto:
        if not hasattr(engine, "budget_policy"):
            raise JfbenchError(f"--budgets auto runs on the hf engine only; engine {engine.name!r} chooses its own budget")
        context = round(sum(len(p.tokens) for p in prompts) / len(prompts))
        policy = engine.budget_policy(auto_budgets, cell.batch_size, context)
    engine.reset_peak_memory()
    steps: list[tuple[int, StepRecord]] = []
    nodes: list[tuple[int, NodeBlock]] = []
    outputs: dict[int, RequestResult] = {}
    started = time.time()
    engine.synchronize()
    t0 = time.perf_counter()
    offset = 0  # cell-wide batch_step of the current chunk's first forward
    for chunk in chunks:
        result = engine.generate([p.tokens for p in chunk], _stop_of(chunk), budget, drafter,
                                 sampling=sampling, request_ids=[p.request for p in chunk],
                                 **({"policy": policy} if policy is not None else {}))
        for record in result.steps:
            steps.append((chunk[record.request].request, replace(record, batch_step=record.batch_step + offset)))
        nodes.extend((chunk[block.request].request, block) for block in result.nodes)
        offset += 1 + max((r.batch_step for r in result.steps), default=-1)
        for res in result.requests:
            outputs[chunk[res.request].request] = res
        if progress is not None:
            progress(len(chunk), sum(len(r.output_tokens) for r in result.requests))
    wall_s = time.perf_counter() - t0  # generate() synchronises before its last clock read
    return CellRun(steps, outputs, wall_s, engine.peak_memory_bytes(), started, time.time(), nodes)
