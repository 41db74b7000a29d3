"""Static shapes for `--compile`: the target forward compiled once per tree bucket.

An eager decoder at batch 1 on a GPU is bound by kernel launches and Python, not by weight reads,
so a 256-node verify costs about what a 1-token step costs and every speed-up looks larger than
it is. `torch.compile` fuses the step; CUDA graphs (``mode="reduce-overhead"``) replay it with
one launch. Both want shapes that do not change from step to step, so a compiled forward

* pads the tree to the smallest bucket that holds it (``TREE_BUCKETS``: 1, 16, 64, 256, 1024;
  padding nodes see the prefix and themselves and write scratch slots past the tree),
* attends over the whole preallocated KV cache, whose capacity is rounded up to
  ``CAPACITY_STEP`` and never shrinks within a runner (masked slots add nothing),
* takes that cache as one graph input per layer for keys and one for values (a ``static``
  `KVCache`), so each layer's write is an in-place ``index_put_`` on its own input rather than a
  scatter that rewrites a stacked cache, and on CUDA those inputs are marked static addresses, the
  only mutated inputs CUDA graphs accept. CUDA graphs replay at the addresses they recorded, so
  the cache never moves: a compiled runner allocates one (`kv_cache.PersistentCache`, at the
  largest batch and capacity it has met) and every batch resets and reuses it, rows leaving the
  batch are compacted in place, and only a batch or capacity beyond it reallocates (a new graph
  anyway), and
* leaves the batch dimension dynamic (rows leave the batch as they finish; batch 1 gets its own graph).

Every shape a decode can meet is compiled by `TargetRunner.warm_up` before the clock starts, on
the persistent cache the decode then uses, so compile time (and on CUDA each graph's recording:
`timed_warm_up` runs a shape until it is recorded) is reported on its own and never lands in a
timed step. Prefill runs eagerly. The learned drafters' head forwards follow the same rules
(`drafters.head_cache.StaticHead`, which owns the head's persistent cache, compiled by
`Drafter.warm_up`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from jetflow_bench.engine.kv_cache import KVCache
from jetflow_bench.errors import JfbenchError
from jetflow_bench.runtime import synchronize

TREE_BUCKETS = (1, 16, 64, 256, 1024)  # padded tree widths; the last is budget_policy.MAX_BUDGET
CAPACITY_STEP = 512  # compiled KV caches hold a multiple of this many slots per row
RECOMPILE_LIMIT = 64  # graphs per compiled function: buckets x {batch 1, dynamic batch} x tap sets, with room


def tree_bucket(n: int) -> int:
    """The padded width of an ``n``-node tree: the smallest bucket >= n (e.g. 5 -> 16, 16 -> 16)."""
    for width in TREE_BUCKETS:
        if n <= width:
            return width
    raise JfbenchError(f"a tree of {n} nodes exceeds the largest compiled bucket {TREE_BUCKETS[-1]}: lower the budget")


def check_compiled_budget(arm: str, budget: int, limit: int | None) -> None:
    """Refuse ``budget`` for an arm that drafts at most ``limit`` nodes at bucketed shapes (None: no limit)."""
    if limit is not None and budget > limit:
        raise JfbenchError(
            f"--compile: {arm} drafts at most budget {limit} at compiled shapes (its head forwards would pass the "
            f"largest bucket {TREE_BUCKETS[-1]}), not budget {budget}: use budgets <= {limit} with --compile, or drop --compile"
        )


def buckets_up_to(n: int) -> tuple[int, ...]:
    """Every bucket a tree of at most ``n`` nodes can land in (a drafter may propose fewer nodes)."""
    return tuple(w for w in TREE_BUCKETS if w <= tree_bucket(n))


def round_capacity(slots: int) -> int:
    return -(-slots // CAPACITY_STEP) * CAPACITY_STEP


def batch_classes(batch: int, device: torch.device) -> list[tuple[int, int | str]]:
    """(rows, graph key) of every batch a decode of ``batch`` rows can shrink to: batch 1 and the
    dynamic batch, or on CUDA every size 1..batch (CUDA graphs record one graph per concrete size)."""
    cuda = device.type == "cuda"
    return [(b, b if cuda or b == 1 else "dynamic") for b in (range(1, batch + 1) if cuda else sorted({1, batch}))]


def pad_visibility(seen: torch.Tensor, width: int) -> torch.Tensor:
    """Pad a forward's entry visibility (B, N, S + N) — its N queries are the last N of S + N
    entries — to ``width`` queries, (B, W, S + W): each padding entry sees only itself.

    Worked example, S = 1, N = 1, W = 2: [[1, 1]] -> [[1, 1, 0], [0, 0, 1]].
    """
    n = seen.shape[-2]
    if width == n:
        return seen
    padded = F.pad(seen, (0, width - n, 0, width - n))
    extra = torch.arange(n, width, device=seen.device)
    padded[:, extra, seen.shape[-1] - n + extra] = True
    return padded


def check_compile(device: torch.device, attention: str) -> None:
    """Fail at the edge, before any model loads, when `--compile` cannot work here."""
    if attention != "sdpa":
        raise JfbenchError(
            f"--compile runs the target with sdpa attention; --attention {attention!r} is not compiled: "
            "drop --compile or use --attention sdpa"
        )
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "c++")):
        raise JfbenchError("--compile on a CPU needs a C/C++ compiler (Inductor builds C++ kernels): install gcc or drop --compile")


class StaticForward:
    """``torch.compile`` of a forward whose inputs already have bucketed shapes.

    Automatic dynamic shapes are off: a dimension is dynamic only where the caller marks it (the
    batch), so each bucket and capacity gets its own specialised graph instead of one generic one.
    """

    def __init__(self, body: Callable, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.fn = torch.compile(body, mode="reduce-overhead" if self.cuda else None)

    @torch.inference_mode()
    def __call__(self, rows: tuple[torch.Tensor, ...], cache: KVCache, *static) -> tuple[torch.Tensor | None, ...]:
        """``rows``: tensors whose dim 0 is the batch; ``cache``: the live KV cache; ``static``: the rest."""
        rows = tuple(graph_input(t) for t in rows)
        static = tuple(graph_input(a) if isinstance(a, torch.Tensor) else a for a in static)
        # The batch dim is marked dynamic on every call, batch 1 included: Dynamo still specialises
        # size 1 (one graph for batch 1, one for every batch >= 2), and a mark is never stale — a cache
        # that `keep_rows` shrank in place to one row keeps its mark, which an unmarked batch-1 graph
        # would refuse, compiling again inside a timed step.
        for t in (*rows, *cache.k, *cache.v):  # cache: (B, H_kv, T_cap, hd) per layer
            torch._dynamo.maybe_mark_dynamic(t, 0)
        if self.cuda:  # a new step: the previous replay's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=RECOMPILE_LIMIT):
            out = self.fn(*rows, cache, *static)
        if self.cuda:  # CUDA-graph outputs live in the graph's pool and die at the next replay
            out = tuple(None if t is None else t.clone() for t in out)
        return out


def graph_input(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a contiguous inference tensor, the one form every compiled call gets.

    Dynamo guards each input's strides and dispatch keys: a warm-up input built outside inference
    mode, or an expanded index (stride 0), would otherwise miss the decode's graph, and the decode
    would compile again inside a timed step. Call under ``torch.inference_mode``.
    """
    return t if t.is_inference() and t.is_contiguous() else t.clone(memory_format=torch.contiguous_format)


def timed_warm_up(run: Callable[[], object], device: torch.device) -> float:
    """Seconds of an untimed warm-up forward (compilation, or a CUDA-graph recording, included).

    On CUDA it runs twice: CUDA-graph trees run a graph's first call without graphs and record it
    at the second, so one run would leave the recording to the decode's first timed step.
    """
    synchronize(device)
    start = time.perf_counter()
    for _ in range(2 if device.type == "cuda" else 1):
        run()
    synchronize(device)
    return time.perf_counter() - start
