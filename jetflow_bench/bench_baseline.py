"""Is our AR baseline at least as fast as `transformers` generate? (docs/methodology.md, "The baseline is honest")

A slow baseline inflates every speed-up, so this compares, in one process with the same thread
count, prompts and lengths, the engine with no drafter against ``model.generate`` (greedy).
Both generate exactly ``max_new_tokens`` per prompt (no early EOS), so tokens/s compare directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from jetflow_bench.engine.loop import cache_capacity, generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.metrics import paired_ratio_ci
from jetflow_bench.runtime import synchronize


@dataclass
class BaselineComparison:
    """One batch size: tokens/s of both implementations and the ratio of each timed pair."""

    batch_size: int
    ours_tok_s: list[float]  # per pair
    hf_tok_s: list[float]  # per pair
    same_tokens: bool  # greedy outputs identical in every pair
    compile_s: float = 0.0  # compiled target: the untimed warm-up before the pairs

    @property
    def ratios(self) -> list[float]:
        """ours / HF tokens per second of each pair (run back to back, so load hits both alike)."""
        return [o / h for o, h in zip(self.ours_tok_s, self.hf_tok_s, strict=True)]

    @cached_property  # a 1,000-draw bootstrap, read by the table, the verdict and the note
    def ratio_ci(self) -> tuple[float, float, float]:
        """The mean per-pair ratio with its 95% bootstrap CI over pairs (`paired_ratio_ci`, the
        statistic every speed-up of the suite carries). Per-pair ratios, not total times: a pair
        that a burst of machine load slowed then weighs no more than any other."""
        hf_s, ours_s = 1 / np.array(self.hf_tok_s), 1 / np.array(self.ours_tok_s)  # seconds per token
        ci = paired_ratio_ci(hf_s, ours_s)  # baseline HF: the ratio is ours' speed-up over it
        return ci["macro"], ci["macro_lo"], ci["macro_hi"]

    @property
    def resolved(self) -> bool:
        """Whether the CI excludes 1.0; otherwise the machine's noise is larger than the difference
        being measured."""
        _, lo, hi = self.ratio_ci
        return lo > 1.0 or hi < 1.0

    @property
    def verdict(self) -> str:
        if not self.resolved:
            return "no difference resolved: CI spans 1.0"
        return "ours faster" if self.ratio_ci[0] > 1.0 else "HF faster"


def hf_greedy(
    target: TargetRunner, prompts: Sequence[Sequence[int]], max_new_tokens: int, static_cache: bool = False
) -> list[list[int]]:
    """Left-padded batched greedy generate, forced to exactly ``max_new_tokens`` tokens.

    ``static_cache``: transformers' own fast path, a preallocated static cache, with which
    ``generate`` also compiles the model's forward on a GPU (its auto-compile; not on a CPU)."""
    width = max(len(p) for p in prompts)
    pad = 0
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=target.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=target.device)
    with torch.inference_mode():
        out = target.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
            do_sample=False, pad_token_id=pad, eos_token_id=None,
            **({"cache_implementation": "static"} if static_cache else {}),
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
    pairs: int = 5,
    progress=None,
    hf_static_cache: bool = False,
) -> list[BaselineComparison]:
    """Warm up both, then time ``pairs`` back-to-back pairs per batch size, alternating which
    implementation goes first (AB, BA, ...), so that drifting machine load falls on both alike;
    ``hf_static_cache``: `hf_greedy`'s static cache (and on a GPU its compile)."""
    rows = []

    def hf(target: TargetRunner, batch: Sequence[Sequence[int]], new: int) -> list[list[int]]:
        return hf_greedy(target, batch, new, hf_static_cache)

    for b in batch_sizes:
        batch = list(prompts[:b])
        capacity = cache_capacity(max(len(p) for p in batch), max_new_tokens, target.tree_width(1))
        compile_s = target.warm_up(b, 1, capacity)  # compiled: every shape the timed runs meet
        _ours(target, batch, 4)  # warm-up, untimed (transformers compiles here under a static cache)
        hf(target, batch, 4)
        tokens = b * max_new_tokens
        ours_rates, hf_rates, same = [], [], True
        for k in range(pairs):
            order = (_ours, hf) if k % 2 == 0 else (hf, _ours)
            timed = {fn: _timed(fn, target, batch, max_new_tokens) for fn in order}
            (t_ours, out_ours), (t_hf, out_hf) = timed[_ours], timed[hf]
            ours_rates.append(tokens / t_ours)
            hf_rates.append(tokens / t_hf)
            same &= out_ours == out_hf
            if progress is not None:
                progress()
        rows.append(BaselineComparison(b, ours_rates, hf_rates, same, compile_s))
    return rows
