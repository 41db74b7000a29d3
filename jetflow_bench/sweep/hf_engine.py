"""The ``hf`` engine: this package's own decoder (`TargetRunner` + `jetflow_bench.engine.loop.generate`)
behind the sweep's `Engine` protocol."""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from drafters import DRAFTERS, Drafter
from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import BudgetPolicy
from jetflow_bench.core.runtime import available_memory_bytes, cpuinfo_field, synchronize
from jetflow_bench.engine import loop as hf_engine
from jetflow_bench.engine.kv_cache import KVCache
from jetflow_bench.engine.loop import BatchResult
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.serving import ServeResult, serve
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig
from jetflow_bench.sweep.prompts import encode


class HFEngine:
    """This package's engine: `TargetRunner` + `jetflow_bench.engine.loop.generate`."""

    name = "hf"

    def __init__(self, target: TargetRunner, profile: bool = False) -> None:
        self.target = target
        self.profile = profile  # time each step's split (`loop.generate`)
        self.tokenizer = target.tokenizer
        self.eos_token_ids = target.eos_token_ids

    @classmethod
    def load(cls, target: str, device: str, dtype: str, attention: str = "sdpa", profile: bool = False,
             compile: bool = False) -> HFEngine:
        return cls(TargetRunner.load(target, device, dtype, attention, compile=compile), profile)

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
                                  request_ids=request_ids, policy=policy, profile=self.profile)

    def serve(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, arrivals: Sequence[float] | None, max_concurrency: int,
        budget: int, drafter: Drafter | None, sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> ServeResult:
        """The load axis (`jetflow_bench.sweep.load`): requests arriving over time, continuously batched."""
        return serve(self.target, prompts, stop, arrivals, max_concurrency, budget=budget, drafter=drafter,
                     sampling=sampling, request_ids=request_ids, policy=policy, profile=self.profile)

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
    name = cpuinfo_field("model name")
    if name is not None:
        return name
    import platform

    return platform.processor() or platform.machine()


def load_engine(config: SweepConfig, run_dir: Path, options: Any = None) -> HFEngine:
    """The `ENGINES` factory for ``hf``."""
    return HFEngine.load(config.target, config.device, config.dtype, attention=config.attention, profile=config.profile,
                         compile=config.compile)
