"""Is our AR baseline at least as fast as the plain decoders people use? (docs/methodology.md, "The baseline is honest")

A slow baseline inflates every speed-up, so this compares the engine with no drafter against a
rival plain decoder, greedy, on the same prompts and lengths, on the same cores: `transformers`
``generate`` in this process, or vLLM's plain decoding in a managed `vllm serve` whose OpenMP
threads are bound to this process's cores (`runtime.cpu_cores`). Every side generates exactly
``max_new_tokens`` per prompt (no early EOS) and is timed the same way, as jfbench's engine defines
decode time: from the batch's first generated token to the end of its last request, over the
tokens generated after the first ones (prefill, and vLLM's request/HTTP start, stay out).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Protocol

import numpy as np
import torch

from jetflow_bench.core.runtime import synchronize
from jetflow_bench.engine.loop import cache_capacity, generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.measure.metrics import paired_ratio_ci


@dataclass
class BaselineComparison:
    """One batch size: decode tokens/s of both decoders and the ratio of each timed pair."""

    batch_size: int
    ours_tok_s: list[float]  # per pair
    theirs_tok_s: list[float]  # per pair
    same_tokens: bool  # greedy outputs identical in every pair
    compile_s: float = 0.0  # compiled target: the untimed warm-up before the pairs
    theirs: str = "transformers"  # the rival's name, for the verdict

    @property
    def ratios(self) -> list[float]:
        """ours / theirs tokens per second of each pair (run back to back, so load hits both alike)."""
        return [o / t for o, t in zip(self.ours_tok_s, self.theirs_tok_s, strict=True)]

    @cached_property  # a 1,000-draw bootstrap, read by the table, the verdict and the note
    def ratio_ci(self) -> tuple[float, float, float]:
        """The mean per-pair ratio with its 95% bootstrap CI over pairs (`paired_ratio_ci`, the
        statistic every speed-up of the suite carries). Per-pair ratios, not total times: a pair
        that a burst of machine load slowed then weighs no more than any other."""
        theirs_s, ours_s = 1 / np.array(self.theirs_tok_s), 1 / np.array(self.ours_tok_s)  # seconds per token
        ci = paired_ratio_ci(theirs_s, ours_s)  # baseline theirs: the ratio is ours' speed-up over it
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
        return "ours faster" if self.ratio_ci[0] > 1.0 else f"{self.theirs} faster"


@dataclass
class Decode:
    """One timed batch: decode seconds (first generated token -> last request done) and the outputs."""

    seconds: float
    outputs: list[list[int]]


class Rival(Protocol):
    """A plain greedy decoder timed against ours."""

    name: str

    def decode(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Decode: ...

    def describe(self) -> str: ...


def hf_greedy(target: TargetRunner, prompts: Sequence[Sequence[int]], max_new_tokens: int,
              static_cache: bool = False, streamer=None) -> list[list[int]]:  # fmt: skip
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
            do_sample=False, pad_token_id=pad, eos_token_id=None, streamer=streamer,
            **({"cache_implementation": "static"} if static_cache else {}),
        )
    return out[:, width:].tolist()


class _FirstToken:
    """A `generate` streamer that notes when the first generated tokens arrive: generate hands it
    the prompt first, then each step's tokens (on a CPU, as soon as they are chosen)."""

    def __init__(self) -> None:
        self.puts, self.first = 0, None

    def put(self, _tokens) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class Transformers:
    """`transformers` generate on the same model object, in this process."""

    name = "transformers"

    def __init__(self, target: TargetRunner, static_cache: bool = False) -> None:
        self.target, self.static_cache = target, static_cache

    def decode(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Decode:
        streamer = _FirstToken()
        outputs = hf_greedy(self.target, prompts, max_new_tokens, self.static_cache, streamer)
        synchronize(self.target.device)
        return Decode(time.perf_counter() - streamer.first, outputs)

    def describe(self) -> str:
        cache = ", its static cache" if self.static_cache else ""
        return f"transformers generate (greedy{cache}, streamer timestamps), same process and cores"


def ours(target: TargetRunner, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Decode:
    """jfbench's engine without a drafter; its own first-token and finish times."""
    result = generate(target, prompts, StopRule(max_new_tokens=max_new_tokens))
    first = min(r.ttft_s for r in result.requests)
    return Decode(max(r.ttft_s + r.decode_s for r in result.requests) - first,
                  [r.output_tokens for r in result.requests])


def compare(
    target: TargetRunner,
    rival: Rival,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    batch_sizes: Sequence[int] = (1, 4),
    pairs: int = 5,
    progress=None,
) -> list[BaselineComparison]:
    """Warm up both, then time ``pairs`` back-to-back pairs per batch size, alternating which
    decoder goes first (AB, BA, ...), so that drifting machine load falls on both alike."""
    if max_new_tokens < 2:
        raise ValueError("decode time needs at least 2 new tokens (the first comes from prefill)")
    rows = []
    sides = {"ours": partial(ours, target), "theirs": rival.decode}
    for b in batch_sizes:
        batch = list(prompts[:b])
        capacity = cache_capacity(max(len(p) for p in batch), max_new_tokens, target.tree_width(1))
        compile_s = target.warm_up(b, 1, capacity)  # compiled: every shape the timed runs meet
        ours(target, batch, 4)  # warm-up, untimed (transformers compiles here under a static cache)
        rival.decode(batch, 4)
        tokens = b * (max_new_tokens - 1)  # generated after the first token of each prompt
        ours_rates, their_rates, same = [], [], True
        for k in range(pairs):
            order = ("ours", "theirs") if k % 2 == 0 else ("theirs", "ours")
            timed = {side: sides[side](batch, max_new_tokens) for side in order}
            ours_rates.append(tokens / timed["ours"].seconds)
            their_rates.append(tokens / timed["theirs"].seconds)
            same &= timed["ours"].outputs == timed["theirs"].outputs
            if progress is not None:
                progress()
        rows.append(BaselineComparison(b, ours_rates, their_rates, same, compile_s, rival.name))
    return rows
