"""How the target runs a verify: at the tree's own shape, or padded to static shapes.

`TargetRunner` verifies through one `VerifyForward`: `EagerVerify`, or with ``--compile`` /
``--graphs`` `StaticVerify` (`jetflow_bench.engine.compiled` says why static shapes). The two differ
only in what this interface names: the cache a batch takes, the width a tree pads to, the cache
slots a forward attends over, and the forward itself. Prefill and scoring always run eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from jetflow_bench.engine.compiled import (
    CompiledRegion,
    StaticForward,
    batch_classes,
    buckets_up_to,
    round_capacity,
    timed_warm_up,
    tree_bucket,
)
from jetflow_bench.engine.kv_cache import KVCache, PersistentCache
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.kernels.mask import TreeMask

# CPU BLAS (MKL in torch's wheels) multiplies 2 or 3 rows as that many matrix-vector products,
# which on the CPUs measured costs more than a 4-row product (results/baselines/smollm2/
# row_padding.py times a verify both ways). So an eager batch-1 verify of 2-3 nodes runs padded to
# this many rows.
CPU_MIN_ROWS = 4

Logits = tuple[torch.Tensor, torch.Tensor | None]  # (B, N, V) float32 logits, (B, N, K, H) taps or None


@dataclass
class PreparedTrees:
    """Padded trees of every row, ready for one target forward."""

    tokens: torch.Tensor  # (B, N) node tokens
    parents: torch.Tensor  # (B, N) parent index per node, -1 for roots and padding
    depths: torch.Tensor  # (B, N)
    valid: torch.Tensor  # (B, N) bool, False for padding
    ancestors: torch.Tensor  # (B, N, N) bool tree-causal mask
    slots: torch.Tensor  # (B, N) cache slot of each node = committed length + node index
    positions: torch.Tensor  # (B, N) RoPE position = committed length + depth
    mask: TreeMask | None  # committed prefix + ancestors over T slots (W queries); None when nothing needs masking
    kv_len: int  # cache slots the forward attends over
    width: int | None  # static shapes: the bucket the forward pads the N nodes to; None: the tree's own width


class VerifyForward(Protocol):
    """One way to run a verify (module docstring)."""

    def take(self, batch: int, capacity: int) -> KVCache:
        """A new batch's empty cache of at least ``capacity`` slots per row."""

    def rows(self, nodes: int, batch: int) -> int:
        """The fewest nodes a verify of ``nodes``-node trees in a batch of ``batch`` pads to."""

    def bucket(self, nodes: int) -> int | None:
        """The static width ``nodes`` padded nodes run at; None: their own."""

    def tree_width(self, budget: int) -> int:
        """Cache slots a tree of ``budget`` nodes occupies while verified."""

    def span(self, cache: KVCache, nodes: int) -> int:
        """Cache slots a forward over ``nodes`` new nodes attends over."""

    def __call__(self, batch: PreparedTrees, cache: KVCache, taps: tuple[int, ...]) -> Logits:
        """Run ``batch`` into ``cache``: logits (and tapped layers) of its N nodes."""


class EagerVerify:
    """A verify at its tree's own width over the slots in use, any attention backend; on a CPU a
    small batch-1 tree runs padded to `CPU_MIN_ROWS` rows."""

    def __init__(self, run: Callable[..., Logits], fresh: Callable[[int, int], KVCache], device: torch.device) -> None:
        self.run = run  # (tokens, positions, slots, mask, kv_len, cache, taps) -> logits, hidden
        self.fresh = fresh
        self.device = device

    def take(self, batch: int, capacity: int) -> KVCache:
        return self.fresh(batch, capacity)

    def rows(self, nodes: int, batch: int) -> int:
        """At least `CPU_MIN_ROWS` on a CPU at batch 1 once a tree has drafted anything (plain decoding
        keeps its one row)."""
        small = self.device.type == "cpu" and batch == 1 and 1 < nodes < CPU_MIN_ROWS
        return CPU_MIN_ROWS if small else nodes

    def bucket(self, nodes: int) -> None:
        return None

    def tree_width(self, budget: int) -> int:
        return self.rows(budget, batch=1)

    def span(self, cache: KVCache, nodes: int) -> int:
        return max(cache.lengths) + nodes

    def __call__(self, batch: PreparedTrees, cache: KVCache, taps: tuple[int, ...]) -> Logits:
        return self.run(batch.tokens, batch.positions, batch.slots, batch.mask, batch.kv_len, cache, taps)


class StaticVerify:
    """A verify padded to its tree bucket, attending over the whole cache, through `StaticForward`:
    under Inductor one compiled decoder layer reused by every layer, on CUDA one recording per shape.

    Lives as long as its runner and owns the one cache every batch and warm-up runs on (CUDA graphs
    replay at the addresses they recorded), at the largest capacity met so far.
    """

    def __init__(
        self, mode: str, storage: PersistentCache, decode: Callable[..., Logits], layer: Callable[..., torch.Tensor],
        scale: float, gqa: bool,
    ) -> None:
        self.device = storage.device
        self.storage = storage
        self.decode, self.run_layer, self.scale, self.gqa = decode, layer, scale, gqa
        # One decoder layer at static shapes; under Inductor compiled once and called by every layer.
        self.layer = CompiledRegion(self._layer) if mode == "inductor" else self._layer
        self.forward = StaticForward(self._body, self.device)
        self.capacity = 0  # slots per row of every cache so far (one graph per capacity)
        self._warmed: set[tuple] = set()  # (batch class, width, capacity, taps, allocation) already run

    def take(self, batch: int, capacity: int) -> KVCache:
        """The persistent cache at the one capacity (a new capacity is a new graph), reset to ``batch`` rows."""
        self.capacity = max(round_capacity(capacity), self.capacity)
        return self.storage.take(batch, self.capacity)

    def rows(self, nodes: int, batch: int) -> int:
        return 1  # the bucket pads

    def bucket(self, nodes: int) -> int:
        return tree_bucket(nodes)

    def tree_width(self, budget: int) -> int:
        return tree_bucket(budget)

    def span(self, cache: KVCache, nodes: int) -> int:
        return cache.capacity

    def __call__(self, batch: PreparedTrees, cache: KVCache, taps: tuple[int, ...]) -> Logits:
        n = batch.tokens.shape[1]
        pad = (0, batch.width - n)  # padding nodes: token 0 at the root's position, scratch slots after the tree
        rows = (F.pad(batch.tokens, pad), F.pad(batch.positions, pad, value=0),
                batch.slots[:, :1] + torch.arange(batch.width, device=self.device), batch.mask.additive())
        logits, hidden = self.forward(rows, cache, taps)  # under inference mode
        return logits[:, :n], None if hidden is None else hidden[:, :n]

    def warm_up(
        self, batch: int, budget: int, capacity: int, taps: tuple[int, ...],
        prepare: Callable[[KVCache, list[DraftTree]], PreparedTrees],
    ) -> float:
        """Run every shape a decode of ``batch`` rows at ``budget`` can meet, on the cache the decode
        will use (``prepare`` makes it the runner's live one), so that no timed step compiles or
        records; returns the seconds spent.

        Shapes: each tree bucket up to the budget's, for batch 1 and the dynamic batch; on CUDA every
        batch size 1..batch, because CUDA graphs record one graph per concrete size.
        """
        self.take(batch, capacity)  # the largest batch first: the storage every class below shares
        seconds = 0.0
        for rows, graph in batch_classes(batch, self.device):
            cache = self.take(rows, capacity)
            for width in buckets_up_to(budget):
                key = (graph, width, cache.capacity, taps, self.storage.allocations)
                if key not in self._warmed:
                    prepared = prepare(cache, [DraftTree.chain([0] * width)] * rows)
                    seconds += timed_warm_up(lambda p=prepared, c=cache: self(p, c, taps), self.device)
                    self._warmed.add(key)
        return seconds

    def _body(
        self,
        tokens: torch.Tensor,  # (B, W) padded to a bucket
        positions: torch.Tensor,  # (B, W)
        slots: torch.Tensor,  # (B, W)
        mask: torch.Tensor,  # (B, 1, W, T_cap) additive
        cache: KVCache,
        taps: tuple[int, ...],
    ) -> Logits:
        """What `StaticForward` runs (and on CUDA records): the target's layer loop with SDPA over the
        whole cache, so no shape depends on the step; each layer through `layer`."""
        return self.decode(tokens, positions, slots, cache, taps,
                           lambda i, layer, h, cos, sin: self.layer(layer, h, cos, sin, slots, mask, cache.k[i], cache.v[i]))

    def _layer(
        self, layer: nn.Module, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
        mask: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
    ) -> torch.Tensor:
        """One decoder layer at static shapes, the region `CompiledRegion` compiles: every argument
        is a module or a tensor, so each layer calls the same compiled graph."""

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.gqa)

        return self.run_layer(layer, h, cos, sin, slots, keys, values, keys.shape[2], attend)
