"""Is our AR baseline at least as fast as `transformers` generate? (docs/methodology.md, "The baseline is honest")

A slow baseline inflates every speed-up, so this compares, in one process with the same thread
count, prompts and lengths, the engine with no drafter against ``model.generate`` (greedy).
Both generate exactly ``max_new_tokens`` per prompt (no early EOS), so tokens/s compare directly.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from jetflow_bench.engine import generate
from jetflow_bench.runtime import synchronize
from jetflow_bench.stopping import StopRule
from jetflow_bench.target import TargetRunner


@dataclass
class BaselineComparison:
    batch_size: int
    ours_tok_s: float  # median over repeats
    hf_tok_s: float  # median over repeats
    ours_spread: tuple[float, float]  # (min, max) tokens/s over repeats
    hf_spread: tuple[float, float]
    same_tokens: bool  # greedy outputs identical

    @property
    def ratio(self) -> float:
        return self.ours_tok_s / self.hf_tok_s


def _hf_generate(target: TargetRunner, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Left-padded batched greedy generate, forced to exactly ``max_new_tokens`` tokens."""
    width = max(len(p) for p in prompts)
    pad = 0
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=target.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=target.device)
    with torch.inference_mode():
        out = target.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
            do_sample=False, pad_token_id=pad, eos_token_id=None,
        )
    return out[:, width:].tolist()


def _ours(target: TargetRunner, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    result = generate(target, prompts, StopRule(max_new_tokens=max_new_tokens))
    return [r.output_tokens for r in result.requests]


def _timed(fn, *args) -> tuple[float, list[list[int]]]:
    device = args[0].device
    synchronize(device)
    start = time.perf_counter()
    out = fn(*args)
    synchronize(device)
    return time.perf_counter() - start, out


def compare_with_hf(
    target: TargetRunner,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    batch_sizes: Sequence[int] = (1, 4),
    repeats: int = 3,
    progress=None,
) -> list[BaselineComparison]:
    """Warm up both, then alternate ours / HF ``repeats`` times per batch size (interleaving
    spreads machine noise evenly over the two)."""
    rows = []
    for b in batch_sizes:
        batch = list(prompts[:b])
        _ours(target, batch, 4)  # warm-up, untimed
        _hf_generate(target, batch, 4)
        ours_rates, hf_rates, same = [], [], True
        for _ in range(repeats):
            t_ours, out_ours = _timed(_ours, target, batch, max_new_tokens)
            t_hf, out_hf = _timed(_hf_generate, target, batch, max_new_tokens)
            tokens = b * max_new_tokens
            ours_rates.append(tokens / t_ours)
            hf_rates.append(tokens / t_hf)
            same &= out_ours == out_hf
            if progress is not None:
                progress()
        rows.append(BaselineComparison(
            b, statistics.median(ours_rates), statistics.median(hf_rates),
            (min(ours_rates), max(ours_rates)), (min(hf_rates), max(hf_rates)), same,
        ))
    return rows
