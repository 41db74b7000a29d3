"""The ``sim`` engine (`--engine sim --tau-only`): drafter cells simulated from the AR cell's outputs.

Greedy speculative decoding emits plain decoding's tokens, so a τ-only sweep needs the target's
tree verification only to learn how far each tree matched them, and that is the costliest part of
a 256-node cell on a real target (about 1.2 s per row and step for SmolLM2 on this machine's CPU).
This engine decodes the AR cell with the ``hf`` engine, for real, and runs every drafter cell
through `engine.simulate`: the drafter live at every step, fed the target's features from one
teacher-forced forward over prompt + output, each step accepting what the known output allows.
τ, acceptance, the pass-1 marginals and the drafting cost are the engine's (tests hold them equal
step for step); what needs the verify forward is not there: no times (timing "none"), so no
speed-up and no throughput, and no losslessness check, since the outputs are the AR cell's by
construction (the summary leaves those columns empty for ``sim`` cells).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jetflow_bench.core.budget_policy import BudgetPolicy
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.loop import BatchResult, RequestResult, check_generate_args
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.serving import ServeResult
from jetflow_bench.engine.simulate import simulate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.sweep.engines import SIM_NOT_SERVING, SIMULATED
from jetflow_bench.sweep.grid import SweepConfig
from jetflow_bench.sweep.hf_engine import HFEngine


class SimEngine(HFEngine):
    """`HFEngine` for plain decoding; drafter cells simulated against its outputs (`engine.simulate`)."""

    name = SIMULATED

    def __init__(self, target: TargetRunner, profile: bool = False) -> None:
        super().__init__(target, profile)
        self.references: dict[tuple[tuple[int, ...], StopRule], RequestResult] = {}  # (prompt, stop rule) -> plain decoding

    def generate(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, budget: int, drafter: Drafter | None,
        sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> BatchResult:
        """Plain decoding (no drafter) for real; a drafter's batch simulated from plain decoding's
        outputs for the same prompts, decoded here first if the AR cell did not (a resumed run)."""
        if drafter is None:
            result = super().generate(prompts, stop, budget, None, sampling, request_ids, policy)
            for r in result.requests:
                self.references[tuple(prompts[r.request]), stop] = r
            return result
        if sampling.temperature or policy is not None:
            raise JfbenchError("--engine sim simulates greedy decoding at fixed budgets: drop --temperature and --budgets auto")
        budget, _ = check_generate_args(prompts, budget, drafter, request_ids, policy)
        missing = [p for p in prompts if (tuple(p), stop) not in self.references]
        if missing:
            self.generate(missing, stop, 1, None)
        references = [self.references[tuple(p), stop] for p in prompts]
        return simulate(self.target, drafter, references, budget)

    def serve(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, arrivals: Sequence[float] | None, max_concurrency: int,
        budget: int, drafter: Drafter | None, sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> ServeResult:
        raise JfbenchError(SIM_NOT_SERVING)

    def label(self, drafter: Drafter | None) -> str:
        """``hf`` for the AR cell (decoded for real), ``sim`` for the simulated drafter cells."""
        return HFEngine.name if drafter is None else self.name


def load_engine(config: SweepConfig, run_dir: Path, options: Any = None) -> SimEngine:
    """The `ENGINES` factory for ``sim``."""
    return SimEngine.load(config.target, config.device, config.dtype, attention=config.attention, profile=config.profile,
                          compile=config.compile)
