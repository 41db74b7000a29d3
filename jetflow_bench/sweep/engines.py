"""The engine seam of a sweep (``--engine``): the `Engine` protocol and the registry of engines.

The sweep only needs `Engine` — load a target, decode a batch of token-id prompts (greedy or
sampled) with an optional drafter, give next-token logits for the losslessness tie check, and
describe itself. ``hf`` is this package's own engine (`jetflow_bench.sweep.hf_engine`); ``sim``
(`jetflow_bench.sweep.sim_engine`) is it with the drafter cells of a τ-only sweep simulated; ``vllm``
(`jetflow_bench.integrations.vllm_engine`) registers next to it without changing the result schema,
which is engine-neutral. An engine factory takes the resolved config, the run folder (for logs) and
engine-specific options that are not part of the config hash; entries load lazily, so naming an
engine imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import Registry
from jetflow_bench.engine.sampling import GREEDY, SamplingParams

if TYPE_CHECKING:
    import torch

    from jetflow_bench.core.budget_policy import BudgetPolicy
    from jetflow_bench.engine.loop import BatchResult
    from jetflow_bench.engine.serving import ServeResult
    from jetflow_bench.engine.stopping import StopRule
    from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig


class Arm(Protocol):
    """What an engine's ``build_drafter`` returns and its ``generate`` takes: a jfbench `Drafter`, or
    an engine's own kind of arm (a vLLM method, `integrations.vllm_arms.VLLMArm`). The sweep only
    caches it and hands it back to the engine that built it."""

    @property
    def name(self) -> str: ...


class Engine(Protocol):
    """What the sweep needs from a decoding engine: every method is required (no optional parts)."""

    name: str
    tokenizer: Any
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]: ...  # prompt text -> ids exactly as the model sees them

    def build_drafter(self, spec: DrafterSpec, checkpoint: Path | None) -> Arm: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, budget: int, drafter: Arm | None,
        sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> BatchResult: ...  # sampling: draw token t of request r with the uniform U[(seed, r), t] (`sampling`)
    # ``policy``: the budget is chosen per step among its candidates (`--budgets auto`); ``budget`` is
    # then the largest one.

    # `--load`: ``prompts`` as requests sent at ``arrivals`` (seconds after the start; None: closed
    # loop), ``max_concurrency`` in flight, each request's chunks stamped (`jetflow_bench.sweep.load`).
    def serve(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, arrivals: Sequence[float] | None,
        max_concurrency: int, budget: int, drafter: Arm | None, sampling: SamplingParams = GREEDY,
        request_ids: Sequence[int] | None = None, policy: BudgetPolicy | None = None,
    ) -> ServeResult: ...

    # `--budgets auto`: a fresh per-cell policy priced on this device (a `JfbenchError` naming the
    # fix where the engine cannot run one).
    def budget_policy(self, candidates: Sequence[int], batch_size: int, context: int) -> BudgetPolicy: ...

    # The target KV cache `generate` would allocate, and the memory free for it; the sweep checks
    # the grid against them before any cell runs. None: the engine manages its own cache pool.
    def kv_cache_bytes(self, batch: int, capacity: int) -> int | None: ...

    def available_memory_bytes(self) -> int | None: ...

    def next_token_logits(self, context: list[int]) -> torch.Tensor: ...  # (V,) float32

    def synchronize(self) -> None: ...  # wait for queued device work before a clock read

    def reset_peak_memory(self) -> None: ...

    def peak_memory_bytes(self) -> int: ...

    def describe(self) -> dict[str, Any]: ...

    def label(self, drafter: Arm | None) -> str: ...  # the `engine` column of a cell run with it

    def baseline_arm(self, drafter: Arm | None) -> str: ...  # the arm its speed-ups divide by

    def close(self) -> None: ...  # release servers, processes (called once, at the end of a sweep)


EngineFactory = Callable[["SweepConfig", Path, Any], Engine]  # (config, run folder, engine options)
ENGINES: Registry[EngineFactory] = Registry("engine")
ENGINES.register("hf", "jetflow_bench.sweep.hf_engine:load_engine")
SIMULATED = "sim"  # τ-only drafter cells simulated from the AR cell's outputs: no times, no losslessness check
SIM_NOT_SERVING = "--engine sim simulates batch decoding, not serving: drop --load, or use --engine hf"
ENGINES.register(SIMULATED, "jetflow_bench.sweep.sim_engine:load_engine")
ENGINES.register("vllm", "jetflow_bench.integrations.vllm_engine:load_engine")


def check_simulated(engine: str, tau_only: bool, temperatures: Sequence[float], load: str | None, policy: bool) -> None:
    """``--engine sim`` measures τ of greedy decoding at fixed budgets only: refuse the rest before any model loads."""
    if engine != SIMULATED:
        return
    if not tau_only:
        raise JfbenchError("--engine sim times nothing (its drafter cells are simulated): add --tau-only, or use --engine hf")
    if any(temperatures):
        raise JfbenchError(f"--engine sim simulates greedy decoding: drop --temperature(s) {','.join(map(str, temperatures))}")
    if load is not None:
        raise JfbenchError(SIM_NOT_SERVING)
    if policy:
        raise JfbenchError("--engine sim needs fixed budgets (a per-step policy prices timed steps): drop auto from --budgets")
