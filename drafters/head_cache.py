"""The draft head's own KV cache over committed context features.

Row b holds, at slot t, the head-layer keys/values of the fused target features of token t of
request b (slot = absolute position). ``append`` extends a row with newly committed tokens (after
prefill: the prompt; after a verify step: root + accepted nodes). Drafted entries of a proposal are
written into a shared scratch region that starts after the longest row and is never committed, so
rejected drafts vanish without any trimming:

    slot    0 ..  len_b-1 | (unused up to max_len) | max_len .. max_len+E-1
    row b   context       | blocked by the mask    | this proposal's entries
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from drafters.base import SequenceView
from jetflow_bench.engine.kv_cache import KVCache
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


class ContextCache:
    """Per-request context keys/values for every head layer, plus each row's newest fused feature."""

    def __init__(self, head: DraftHead, requests: Sequence[int], capacity: int = 256) -> None:
        cfg = head.cfg
        param = head.fc.weight
        self.head = head
        self.requests = list(requests)  # request id of each row
        self.kv = KVCache(cfg.num_layers, len(requests), cfg.num_kv_heads, cfg.head_dim, capacity, param.dtype, param.device)
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
