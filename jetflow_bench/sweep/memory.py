"""Will the sweep's largest KV cache fit? Checked before any cell runs.

A grid too big for the machine should be an error that says so, with its numbers, not an
out-of-memory kill (or a CUDA OOM) hours into a run. The target's KV cache is the allocation that
grows with the grid: per prompt batch it holds

    2 (K, V) x layers x batch x kv_heads x (longest prompt + max_new_tokens + budget) x head_dim x bytes

(`KVCache.bytes_needed`, capacity from `engine.cache_capacity`). The check takes the largest over
every suite, batch size and budget of the grid, batching the prompts exactly as the cells will,
and compares it with the memory still available once the target is loaded (free device memory;
on CPU, MemAvailable within the container's limit) or with ``--max-memory``. Weights are already
loaded, so they are not counted again; drafter state and activations come on top and are not
estimated — the check catches grids that cannot fit, not every grid that will not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.loop import cache_capacity
from jetflow_bench.sweep.engines import Engine
from jetflow_bench.sweep.grid import SweepConfig
from jetflow_bench.sweep.records import Prompt
from jetflow_bench.sweep.runner import batches

_UNITS = {"": 2**30, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]i?b|b)?\s*$", re.IGNORECASE)


def parse_size(text: str, flag: str = "--max-memory") -> int:
    """'24GiB' -> 25769803776, '512MB' -> 512000000, '40' -> 40 GiB (a bare number is GiB)."""
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise JfbenchError(f"{flag} {text!r}: give a positive size such as 40GiB, 512MiB or 80GB (a bare number is GiB)")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def largest_cache(engine: Engine, config: SweepConfig, prompts: Mapping[str, Sequence[Prompt]]) -> tuple[int, str]:
    """(bytes, where) of the largest target KV cache any cell of the grid allocates."""
    worst, where = 0, ""
    for suite, suite_prompts in prompts.items():
        for batch_size in config.batch_sizes:
            for chunk in batches(suite_prompts, batch_size):
                longest = max(len(p.tokens) for p in chunk)
                max_new = max(p.stop.max_new_tokens for p in chunk)
                for budget in {1, *(size for b in config.budgets for size in b.sizes)}:  # auto: every candidate
                    capacity = cache_capacity(longest, max_new, budget)
                    need = engine.kv_cache_bytes(len(chunk), capacity)
                    if need is not None and need > worst:
                        worst = need
                        where = (f"{suite}, batch {len(chunk)} x ({longest} prompt + {max_new} new + {budget} budget "
                                 f"= {capacity} slots)")  # fmt: skip
    return worst, where


def check_memory(
    engine: Engine, config: SweepConfig, prompts: Mapping[str, Sequence[Prompt]], max_memory: int | None
) -> None:
    """Raise a `JfbenchError` with the numbers when the largest KV cache exceeds the memory allowed."""
    available = max_memory if max_memory is not None else engine.available_memory_bytes()
    if available is None:
        return
    need, where = largest_cache(engine, config, prompts)
    if need > available:
        source = "--max-memory allows" if max_memory is not None else f"{config.device} has free"
        raise JfbenchError(
            f"the sweep's largest KV cache ({where}) needs {gib(need)}, but {source} {gib(available)}: "
            "lower --batch-sizes, --budgets, --max-new-tokens or --limit, or pass --max-memory SIZE "
            "(e.g. 80GiB) to override the check"
        )
