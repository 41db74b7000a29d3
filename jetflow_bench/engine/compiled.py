"""Static shapes for `--compile`: the target's step run once per tree bucket at fixed shapes.

An eager decoder at batch 1 on a GPU is bound by kernel launches and Python, not by weight reads,
so a 256-node verify costs about what a 1-token step costs and every speed-up looks larger than
it is. Two modes remove that overhead (`COMPILE_MODES`):

* ``graphs``: the step runs as written and is recorded as one CUDA graph per shape
  (`torch.cuda.CUDAGraph`, direct capture: no Dynamo, no code generation, so recording every
  bucket costs a few eager forwards); each later step copies its inputs into the graph's input
  buffers and replays every kernel with one launch. CUDA only.
* ``inductor`` (plain ``--compile``): each decoder layer goes through Inductor, compiled once and
  reused by every layer (regional compilation, `CompiledRegion`: a deep model costs about one
  layer's build, not one build per layer), and on CUDA the whole step is then recorded as a CUDA
  graph exactly as in ``graphs``.

Both want shapes that do not change from step to step, so a static-shape step

* pads the tree to the smallest bucket that holds it (``TREE_BUCKETS``: 1, 16, 64, 256, 1024;
  padding nodes see the prefix and themselves and write scratch slots past the tree),
* attends over the whole preallocated KV cache, whose capacity is rounded up to
  ``CAPACITY_STEP`` and never shrinks within a runner (masked slots add nothing),
* takes that cache as one tensor per layer for keys and one for values (a ``static`` `KVCache`),
  so each layer's write is an in-place ``index_put_`` on its own tensor rather than a scatter
  that rewrites a stacked cache. CUDA graphs replay at the addresses they recorded, so the cache
  never moves: a static runner allocates one (`kv_cache.PersistentCache`, at the largest batch
  and capacity it has met) and every batch resets and reuses it, rows leaving the batch are
  compacted in place, and only a batch or capacity beyond it reallocates (a new graph anyway), and
* leaves the batch dimension dynamic for Inductor (rows leave the batch as they finish; batch 1
  gets its own graph), while a CUDA graph is recorded per concrete batch size.

Every shape a decode can meet is compiled and recorded by `TargetRunner.warm_up` before the clock
starts, on the persistent cache the decode then uses, so that time is reported on its own and
never lands in a timed step. Prefill runs eagerly. The learned drafters' head forwards follow the
same rules (`drafters.head_cache.StaticHead`, which owns the head's persistent cache, warmed by
`Drafter.warm_up`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import synchronize
from jetflow_bench.engine.kv_cache import KVCache

TREE_BUCKETS = (1, 16, 64, 256, 1024)  # padded tree widths; the last is budget_policy.MAX_BUDGET
CAPACITY_STEP = 512  # compiled KV caches hold a multiple of this many slots per row
RECOMPILE_LIMIT = 64  # graphs per compiled region: buckets x {batch 1, dynamic batch} x capacities, with room
COMPILE_MODES = ("inductor", "graphs")  # `compile_mode`; None is eager


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
    cuda = records_cuda_graphs(device)
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


def compile_mode(value: bool | str | None) -> str | None:
    """The static-shape mode asked for: True (a run's config from before ``--graphs``) is
    ``inductor``; False or None is eager (None); otherwise one of `COMPILE_MODES`."""
    if value is True:
        return "inductor"
    if value in (False, None):
        return None
    if value not in COMPILE_MODES:
        raise JfbenchError(f"compile mode {value!r} is unknown: use one of {', '.join(COMPILE_MODES)}")
    return value


def compile_flags(compile: bool, graphs: bool) -> str | None:
    """The mode of the ``--compile`` and ``--graphs`` flags (one at most)."""
    if compile and graphs:
        raise JfbenchError("--compile and --graphs: pick one (--compile already records CUDA graphs on a GPU, "
                           "--graphs records them without an Inductor build)")
    return "inductor" if compile else "graphs" if graphs else None


def records_cuda_graphs(device: torch.device) -> bool:
    """Static-shape steps on this device are recorded and replayed as CUDA graphs."""
    return device.type == "cuda"


def check_compile(device: torch.device, attention: str, mode: bool | str | None = "inductor") -> None:
    """Fail at the edge, before any model loads, when `--compile` (in ``mode``) cannot work here."""
    mode = compile_mode(mode)
    flag = "--compile" if mode == "inductor" else "--graphs"
    if attention != "sdpa":
        raise JfbenchError(
            f"{flag} runs the target with sdpa attention; --attention {attention!r} is not compiled: "
            f"drop {flag} or use --attention sdpa"
        )
    if mode == "graphs" and not records_cuda_graphs(device):
        raise JfbenchError(f"--graphs records CUDA graphs, which need a CUDA device, not {device.type}: "
                           "run it on a GPU, or use --compile (Inductor) or neither here")
    if mode == "inductor" and device.type == "cpu" and not any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "c++")):
        raise JfbenchError("--compile on a CPU needs a C/C++ compiler (Inductor builds C++ kernels): install gcc or drop --compile")


class CompiledRegion:
    """Inductor on one repeated region (a decoder layer; a draft head's layers), reused by every call.

    Regional compilation: the region's code is traced once per shape, and since Dynamo inlines
    modules and takes their parameters as graph inputs, every layer of the model calls the same
    compiled graph (a 36-layer model builds one layer, not 36). Called inside a `StaticForward`,
    which turns automatic dynamic shapes off for the whole step (once per step: a config patch per
    layer cost about 0.1 ms each on a CPU): a dimension is dynamic only where marked here (dim 0,
    the batch, of every tensor argument and of a `KVCache`'s tensors), so each bucket and capacity
    gets its own specialised graph instead of one generic one.
    """

    def __init__(self, fn: Callable) -> None:
        self.fn = torch.compile(fn)

    def __call__(self, *args):
        # Marked on every call, batch 1 included: Dynamo still specialises size 1 (one graph for
        # batch 1, one for every batch >= 2), and a mark is never stale — a cache that `keep_rows`
        # shrank in place to one row keeps its mark, which an unmarked batch-1 graph would refuse,
        # compiling again inside a timed step.
        for arg in args:
            for t in (*arg.k, *arg.v) if isinstance(arg, KVCache) else (arg,) if isinstance(arg, torch.Tensor) else ():
                torch._dynamo.maybe_mark_dynamic(t, 0)
        return self.fn(*args)


def static_shape_settings():
    """Dynamo's settings for a static-shape step: no automatic dynamic shapes (`CompiledRegion`),
    room for every bucket's graphs."""
    return torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=RECOMPILE_LIMIT)


class StaticForward:
    """A static-shape step: called as is, or where `records_cuda_graphs` recorded once per shape as
    a CUDA graph (`record_cuda_graph`) and replayed.

    A recording's key is every input's shape and dtype, the cache's addresses and shape, and the
    static arguments: a reallocated cache, a new bucket or a new batch size is a new recording.
    """

    def __init__(self, body: Callable, device: torch.device) -> None:
        self.fn = body
        self.graphs: dict[tuple, RecordedGraph] | None = {} if records_cuda_graphs(device) else None
        self.pool = None  # the memory pool every recording shares (graphs replay one at a time)

    @torch.inference_mode()
    def __call__(self, rows: tuple[torch.Tensor, ...], cache: KVCache, *static) -> tuple[torch.Tensor | None, ...]:
        """``rows``: tensors whose dim 0 is the batch; ``cache``: the live KV cache; ``static``: the
        hashable rest (e.g. the tapped layers)."""
        rows = tuple(graph_input(t) for t in rows)
        if self.graphs is None:
            with static_shape_settings():
                return self.fn(*rows, cache, *static)
        blocks = (*cache.k, *cache.v)
        key = (tuple((t.shape, t.dtype) for t in rows), tuple(t.data_ptr() for t in blocks), blocks[0].shape, static)
        graph = self.graphs.get(key)
        if graph is None:
            inputs = tuple(t.clone() for t in rows)  # the graph's input buffers, outside its pool
            with static_shape_settings():
                outputs, replay, self.pool = record_cuda_graph(lambda: self.fn(*inputs, cache, *static), self.pool)
            graph = self.graphs[key] = RecordedGraph(inputs, outputs, replay)
        return graph(rows)


class RecordedGraph:
    """One recorded step: its input buffers, the outputs its replay overwrites, and the replay."""

    def __init__(self, inputs: tuple[torch.Tensor, ...], outputs: tuple, replay: Callable[[], None]) -> None:
        self.inputs, self.outputs, self.replay = inputs, outputs, replay

    def __call__(self, rows: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor | None, ...]:
        for buffer, t in zip(self.inputs, rows, strict=True):
            buffer.copy_(t)
        self.replay()
        # The outputs live in the shared pool, which the next replay of any graph may overwrite.
        return tuple(None if t is None else t.clone() for t in self.outputs)


def record_cuda_graph(run: Callable[[], tuple], pool: object | None) -> tuple[tuple, Callable[[], None], object]:
    """Record ``run`` (a step on fixed input buffers) as a CUDA graph in ``pool`` (None: a new one):
    (its outputs, the replay, the pool). It runs once first on a side stream, so that lazy
    initialisations (cuBLAS workspaces, an Inductor region's compilation) happen outside the capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = run()
    return outputs, graph.replay, graph.pool()


def graph_input(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a contiguous inference tensor, the one form every compiled call gets.

    Dynamo guards each input's strides and dispatch keys: a warm-up input built outside inference
    mode, or an expanded index (stride 0), would otherwise miss the decode's graph, and the decode
    would compile again inside a timed step. Call under ``torch.inference_mode``.
    """
    return t if t.is_inference() and t.is_contiguous() else t.clone(memory_format=torch.contiguous_format)


def timed_warm_up(run: Callable[[], object], device: torch.device) -> float:
    """Seconds of an untimed warm-up forward (compilation, or a CUDA-graph recording, included)."""
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start
