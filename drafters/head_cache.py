"""The draft head's own KV cache over committed context features.

Row b holds, at slot t, the head-layer keys/values of the fused target features of token t of
request b (slot = absolute position). ``append`` extends a row with newly committed tokens (after
prefill: the prompt; after a verify step: root + accepted nodes). Drafted entries of a proposal are
written into a shared scratch region that starts after the longest row and is never committed, so
rejected drafts vanish without any trimming:

    slot    0 ..  len_b-1 | (unused up to max_len) | max_len .. max_len+E-1
    row b   context       | blocked by the mask    | this proposal's entries

Under ``--compile`` (`StaticHead`) a forward's entries are padded to a tree bucket (padding
entries see the context and themselves, no real entry sees them, and they land in scratch slots
after the real ones, where the next forward's entries overwrite them), attention runs over
the cache's whole capacity, and that capacity is fixed at warm-up, so every drafting forward
reuses a graph compiled before the clock started. The cache itself is `StaticHead`'s one
persistent cache, which warm-up runs on and every batch's `ContextCache` resets and reuses, so on
CUDA the drafting forwards replay the graphs warm-up recorded, at the same addresses. Only the
draft layers are compiled: the fusion and context keys of committed tokens (`append`), the LM
head and the top-K stay eager — one matmul each with a step-dependent row count, nothing to fuse.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from jetflow_bench.engine.compiled import (
    CompiledRegion,
    StaticForward,
    batch_classes,
    pad_visibility,
    round_capacity,
    timed_warm_up,
    tree_bucket,
)
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.kv_cache import KVCache, PersistentCache
from jetflow_bench.heads.head import DraftHead
from jetflow_bench.kernels.mask import TreeMask


class ScratchKV:
    """KVStore for one inference forward: its entries are written in place at slots [start, start + count)."""

    def __init__(self, kv: KVCache, start: int, count: int) -> None:
        self.kv = kv
        self.start = start  # first scratch slot of this forward's entries
        self.count = count  # entries in this forward

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.kv.write_span(layer, self.start, k, v)  # every row's entries at slots [start, start + count)
        return self.kv.view(layer, self.start + self.count)


class SlotKV:
    """KVStore of a compiled forward: entries written at per-row slots, keys over the whole cache."""

    def __init__(self, kv: KVCache, slots: torch.Tensor) -> None:
        self.kv = kv
        self.slots = slots  # (B, W)

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.kv.write(layer, self.slots, k, v)
        return self.kv.view(layer, self.kv.capacity)


class StaticHead:
    """``--compile``: a head's draft layers through `StaticForward`, one graph (and on CUDA one
    recording) per entry bucket.

    Lives as long as its drafter (the compiled function is bound to it, never to a batch's cache),
    and owns the context cache every batch reuses (`take`) and its capacity, so no timed forward
    meets a new shape or, on CUDA, a new address.
    """

    def __init__(self, head: DraftHead, device: torch.device, mode: str = "inductor") -> None:
        self.head = head
        self.device = device
        # ``mode`` is the target's (`compiled.COMPILE_MODES`): Inductor compiles the head's layers as one region
        self.forward = StaticForward(CompiledRegion(self._body) if mode == "inductor" else self._body, device)
        self.capacity = round_capacity(1)  # context-cache slots per row; raised by `warm_up`, never lowered
        cfg = head.cfg
        self.storage = PersistentCache(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, head.fc.weight.dtype, device)
        self._warmed: set[tuple] = set()  # (graph key of the batch, bucket, capacity, allocation) already run once

    def take(self, rows: int) -> KVCache:
        """The persistent context cache, reset to ``rows`` empty rows: one live batch at a time."""
        return self.storage.take(rows, self.capacity)

    def _body(
        self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor, kv: KVCache
    ) -> tuple[torch.Tensor]:
        """What `StaticForward` runs: x (B, W, H_in), positions and slots (B, W), the additive
        mask (B, 1, W, capacity) -> the head's output features (B, W, H)."""

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, _: object, scale: float) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])

        return (self.head.run(x, positions, None, SlotKV(kv, slots), attend),)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor, kv: KVCache) -> torch.Tensor:
        return self.forward((x, positions, slots, mask), kv)[0]  # `StaticForward` runs under inference mode

    def warm_up(self, batch: int, widths: Sequence[int], slots: int) -> float:
        """Run every entry bucket in ``widths`` at every batch class a decode of ``batch`` rows meets,
        on the persistent cache (at least ``slots`` slots per row) the batches then reuse; returns
        the seconds spent."""
        dtype = self.head.fc.weight.dtype
        self.capacity = max(round_capacity(slots), self.capacity)
        self.take(batch)  # the largest batch first: the storage every class below shares
        seconds = 0.0
        for rows, graph in batch_classes(batch, self.device):
            kv = self.take(rows)
            for w in widths:
                key = (graph, w, kv.capacity, self.storage.allocations)
                if key in self._warmed:
                    continue
                x = torch.zeros(rows, w, self.head.input_size, dtype=dtype, device=self.device)
                index = torch.arange(w, device=self.device).expand(rows, w)
                mask = torch.zeros(rows, 1, w, kv.capacity, dtype=dtype, device=self.device)
                seconds += timed_warm_up(lambda x=x, i=index, m=mask, kv=kv: self(x, i, i, m, kv), self.device)
                self._warmed.add(key)
        return seconds


class ContextCache:
    """Per-request context keys/values for every head layer, plus each row's newest fused feature."""

    def __init__(self, head: DraftHead, requests: Sequence[int], capacity: int = 256, static: StaticHead | None = None) -> None:
        cfg = head.cfg
        param = head.fc.weight
        self.static = static  # compiled drafting forwards; None: eager
        self.head = head
        self.requests = list(requests)  # request id of each row
        if static is None:
            self.kv = KVCache(cfg.num_layers, len(requests), cfg.num_kv_heads, cfg.head_dim, capacity, param.dtype, param.device)
        else:  # the head's persistent cache (`StaticHead.take`); the previous batch's ContextCache is done with it
            self.kv = static.take(len(requests))
        self.last_feature = torch.zeros(len(requests), cfg.hidden_size, dtype=param.dtype, device=param.device)  # (B, H)
        self._positions: torch.Tensor | None = None  # `anchor_positions`, until the lengths change

    @property
    def lengths(self) -> list[int]:
        return self.kv.lengths

    @property
    def max_len(self) -> int:
        return max(self.kv.lengths)

    def align(self, seqs: Sequence[SequenceView]) -> None:
        """Drop rows of requests that left the batch; rows keep the engine's order."""
        wanted = [s.request for s in seqs]
        if wanted != self.requests:
            rows = [self.requests.index(r) for r in wanted]
            self.kv.keep_rows(rows)
            self.last_feature = self.last_feature[rows]
            self.requests = wanted
            self._positions = None

    def merge(self, other: ContextCache) -> None:
        """Append ``other``'s rows (requests admitted into a running batch) after this cache's rows."""
        self.kv.add_rows(other.kv)
        self.last_feature = torch.cat([self.last_feature, other.last_feature])
        self.requests = self.requests + other.requests
        self._positions = None

    def observe(self, seqs: Sequence[SequenceView], features: Sequence[torch.Tensor]) -> None:
        """The engine committed tokens (`Drafter.observe`): cache their features."""
        self.append(features)

    @torch.inference_mode()
    def append(self, features: Sequence[torch.Tensor]) -> None:
        """features[b]: (n_b, K, H) tapped target states of row b's newly committed tokens."""
        fused, counts = self.fuse(features)
        self.write_entries(fused, counts)
        self.last_feature = self.newest(fused, counts)

    def fuse(self, features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
        """features[b] (n_b, K, H) -> the head's fused features (B, max n_b, H), zero-padded, and n_b."""
        counts = [f.shape[0] for f in features]
        device = self.last_feature.device
        if len(features) == 1:
            padded = features[0][None]  # (1, n, K, H): nothing to pad
        else:
            padded = torch.zeros(len(features), max(counts), *features[0].shape[1:], dtype=features[0].dtype, device=device)
            for b, f in enumerate(features):
                padded[b, : f.shape[0]] = f
        return self.head.fuse(padded.to(device=device, dtype=self.last_feature.dtype)), counts

    def write_entries(self, entries: torch.Tensor, counts: Sequence[int]) -> None:
        """Commit the head's context keys/values of ``entries`` (B, n, ...): row b's first counts[b]
        land after its context, at their absolute positions (padding lands in unused slots)."""
        n = entries.shape[1]
        if n == 0:
            return
        self.kv.reserve(self.max_len + n)
        device = self.last_feature.device
        shared_start = len(set(self.lengths)) == 1  # e.g. batch 1: one slice per layer
        if shared_start:
            slots = torch.arange(self.lengths[0], self.lengths[0] + n, device=device).expand(len(counts), n)
        else:  # (B, n)
            slots = self.anchor_positions()[:, None] + torch.arange(n, device=device)
        for layer, (k, v) in enumerate(self.head.context_kv(entries, slots)):
            if shared_start:
                self.kv.write_span(layer, self.lengths[0], k, v)
            else:
                self.kv.write(layer, slots, k, v)
        self.kv.advance(counts)
        self._positions = None

    @staticmethod
    def newest(fused: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """Each row's newest fused feature, (B, H)."""
        if len(set(counts)) == 1:  # every row's newest token is the last column (always at batch 1)
            return fused[:, -1]
        last = torch.tensor([c - 1 for c in counts], device=fused.device)
        return fused[torch.arange(len(counts), device=fused.device), last]

    def forward(self, x: torch.Tensor, positions: torch.Tensor, entries: torch.Tensor, start: int = 0) -> torch.Tensor:
        """One head forward over a proposal's entries ``start .. start + N - 1`` (scratch slots):
        x (B, N, H_in), positions (B, N), entries (B, N, start + N) or (N, start + N): which of the
        proposal's entries each sees (`mask`). Returns the head's output (B, N, H).

        Compiled (`StaticHead`), the cost meter still counts the eager forward's entries and keys:
        padding is the compiler's price, not drafting work the algorithm asks for."""
        b, n = positions.shape
        if self.static is None:
            return self.head(x, positions, self.mask(entries, x.dtype), self.scratch(start, n))
        if self.head.meter is not None:
            self.head.meter.forward(b, n, self.max_len + start + n)
        width = tree_bucket(n)
        first = self.max_len + start  # scratch slot of this forward's first entry
        self.kv.reserve(first + width)
        seen = pad_visibility(entries.expand(b, n, entries.shape[-1]), width)  # (B, W, start + W)
        start_slot = torch.full((b,), self.max_len, dtype=torch.long, device=x.device)
        # As `mask`, but over the whole cache: no shape follows the step.
        mask = TreeMask(self.anchor_positions()[:, None].expand(b, width), start_slot, seen, self.kv.capacity, x.dtype)
        slots = (first + torch.arange(width, device=x.device)).expand(b, width)
        pad = (0, width - n)
        return self.static(F.pad(x, (0, 0, *pad)), F.pad(positions, pad), slots, mask.additive(), self.kv)[:, :n]

    def scratch(self, start: int, count: int) -> ScratchKV:
        """A store whose entries occupy scratch slots [max_len + start, max_len + start + count)."""
        self.kv.reserve(self.max_len + start + count)
        return ScratchKV(self.kv, self.max_len + start, count)

    def mask(self, entries: torch.Tensor, dtype: torch.dtype) -> TreeMask:
        """The mask of a forward over scratch entries: every entry of row b sees row b's committed
        context (and nothing of the other rows' longer contexts), then the entries ``entries``
        (B, N, E) or (N, E) allows. The same as ``join(context_allowed(...), entries, dtype)``
        without building the (B, N, max_len) boolean rows."""
        n = entries.shape[-2]
        return TreeMask.after_prefixes(self.anchor_positions()[:, None].expand(-1, n), self.max_len, entries, dtype)

    def anchor_positions(self) -> torch.Tensor:
        """(B,) position of each row's root / anchor (= its committed context length)."""
        if self._positions is None:
            self._positions = torch.tensor(self.lengths, device=self.last_feature.device)
        return self._positions
