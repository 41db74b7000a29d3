"""A preallocated, batched KV cache written in place.

Each row (sequence) has its own committed length; slots at and beyond it are scratch space that
a verify step writes its tree into. Committing an accepted path moves that path's slots down to
the end of the row's prefix, so rejected nodes simply fall outside the committed length.

Worked example (one row, committed length L = 5, tree of 4 nodes written at slots 5..8,
accepted path = nodes [0, 1, 3]):

    slot    0 1 2 3 4 | 5    6    7    8
    before  p p p p p | n0   n1   n2   n3
    commit: dst 5,6,7 <- src 5,6,8
    after   p p p p p | n0   n1   n3   (n3)      length 8
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class KVCache:
    """Keys and values for every layer: (layers, batch, kv_heads, capacity, head_dim) each."""

    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (n_layers, batch, kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H_kv, T_cap, hd)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H_kv, T_cap, hd)
        self.lengths = [0] * batch  # committed slots per row (host-side: no device sync to read)
        self.capacity = capacity

    @staticmethod
    def bytes_needed(
        n_layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype
    ) -> int:
        """What the constructor allocates: 2 (K, V) x layers x batch x kv_heads x capacity x head_dim x itemsize."""
        return 2 * n_layers * batch * kv_heads * capacity * head_dim * dtype.itemsize

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def reserve(self, slots: int) -> None:
        """Make room for ``slots`` slots per row, doubling the capacity so growth stays rare.

        Committed slots keep their place; rows, lengths and dtype are unchanged.
        """
        if slots <= self.capacity:
            return
        capacity = self.capacity
        while capacity < slots:
            capacity *= 2
        grow = (0, 0, 0, capacity - self.capacity)  # pad dim 3 (slots) at its end
        self.k = torch.nn.functional.pad(self.k, grow)
        self.v = torch.nn.functional.pad(self.v, grow)
        self.capacity = capacity

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new keys/values of one layer at per-row slots.

        slots: (B, N) long; k, v: (B, H_kv, N, hd).
        """
        rows = torch.arange(slots.shape[0], device=slots.device)[:, None]  # (B, 1)
        # Advanced indices on dims 0 and 2 put (B, N) first: the target view is (B, N, H_kv, hd).
        self.k[layer][rows, :, slots] = k.transpose(1, 2)
        self.v[layer][rows, :, slots] = v.transpose(1, 2)

    def write_span(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """`write` when every row's slots are start .. start + N - 1: a slice copy, which on a CPU
        costs a fraction of the scattered write (the draft head's scratch entries, batch-1 context).

        k, v: (B, H_kv, N, hd).
        """
        n = k.shape[2]
        self.k[layer, :, :, start : start + n] = k
        self.v[layer, :, :, start : start + n] = v

    def view(self, layer: int, kv_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of one layer over slots [0, kv_len): (B, H_kv, kv_len, hd) each."""
        return self.k[layer, :, :, :kv_len], self.v[layer, :, :, :kv_len]

    def commit(self, paths: Sequence[Sequence[int]]) -> None:
        """Make each row's accepted path (node indices, root first) an ordinary prefix.

        Node j of row b was written at slot lengths[b] + j; the i-th path node moves to slot
        lengths[b] + i. Paths are increasing (parents precede children), so sources never lie
        below their destinations; the gather copies before the scatter writes anyway.
        """
        rows, src, dst = [], [], []
        for b, path in enumerate(paths):
            base = self.lengths[b]
            for i, node in enumerate(path):
                if node != i:
                    rows.append(b)
                    src.append(base + node)
                    dst.append(base + i)
            self.lengths[b] = base + len(path)
        if rows:
            device = self.k.device
            rows_t = torch.tensor(rows, device=device)
            src_t = torch.tensor(src, device=device)
            dst_t = torch.tensor(dst, device=device)
            # Advanced indices on dims 1 and 3 put M first: (M, L, H_kv, hd).
            self.k[:, rows_t, :, dst_t] = self.k[:, rows_t, :, src_t]
            self.v[:, rows_t, :, dst_t] = self.v[:, rows_t, :, src_t]

    def advance(self, counts: Sequence[int]) -> None:
        """Commit the ``counts[b]`` slots just written after each row's prefix where they lie
        (`commit` with identity paths, without walking them)."""
        self.lengths = [n + c for n, c in zip(self.lengths, counts, strict=True)]

    def keep_rows(self, rows: Sequence[int]) -> None:
        """Drop finished sequences so later forwards skip them (one copy per finish event)."""
        index = torch.tensor(list(rows), device=self.k.device)
        self.k = self.k.index_select(1, index)
        self.v = self.v.index_select(1, index)
        self.lengths = [self.lengths[r] for r in rows]
