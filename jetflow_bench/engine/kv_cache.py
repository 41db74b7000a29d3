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

Layout: ``k[layer]`` and ``v[layer]`` are (B, H_kv, T_cap, hd) tensors of their own whenever the
cache is ``static`` (a compiled runner's). A compiled forward takes the cache as graph inputs and
writes each layer's new entries inside the graph; were the layers views of one stacked tensor,
functionalization would turn every layer's write into a scatter back into the whole stack (the
entire cache rewritten per layer per step). Separate tensors make each write an in-place
``index_put_`` on its own input (gpt-fast keeps one cache buffer per layer for the same reason).
An eager cache allocates one (2L, B, H_kv, T_cap, hd) block and views its layers out of it, so
committing a path stays one gather and one scatter rather than one pair per layer.

A static cache keeps its addresses: dropping rows compacts every cache in place, and a static
runner allocates its cache once (`PersistentCache`) and starts every batch on the same tensors
(`reset`): CUDA graphs replay only at the addresses they recorded, so a fresh cache per batch would
record every graph again inside that batch's first timed step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def write_entries(keys: torch.Tensor, values: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store one layer's new keys/values at per-row slots of its (B, H_kv, T_cap, hd) tensors, in
    place. slots: (B, N) long; k, v: (B, H_kv, N, hd)."""
    rows = torch.arange(slots.shape[0], device=slots.device)[:, None]  # (B, 1)
    # Advanced indices on dims 0 and 2 put (B, N) first: the target view is (B, N, H_kv, hd).
    keys[rows, :, slots] = k.transpose(1, 2)
    values[rows, :, slots] = v.transpose(1, 2)


class KVCache:
    """Keys and values for every layer: ``k[layer]``, ``v[layer]`` of (batch, kv_heads, capacity, head_dim)."""

    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
        static: bool = False,
    ) -> None:
        shape = (batch, kv_heads, capacity, head_dim)
        self.static = static  # a compiled runner's: one tensor per layer, addresses kept (module docstring)
        self.n_layers = n_layers
        if static:
            blocks = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(2 * n_layers)]
        else:
            blocks = [torch.zeros((2 * n_layers, *shape), dtype=dtype, device=device)]
        self._use(blocks)
        self.lengths = [0] * batch  # committed slots per row (host-side: no device sync to read)
        self.capacity = capacity
        self.room = batch  # rows the eager tensors' storage holds (`keep_rows` keeps it, `add_rows` reuses it)

    @staticmethod
    def bytes_needed(
        n_layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype
    ) -> int:
        """What the constructor allocates: 2 (K, V) x layers x batch x kv_heads x capacity x head_dim x itemsize."""
        return 2 * n_layers * batch * kv_heads * capacity * head_dim * dtype.itemsize

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def rows_held(self) -> int:
        """Rows the static tensors' storage holds, however many `keep_rows` or `reset` present."""
        t = self._blocks[0]  # (B, H_kv, T_cap, hd), row stride H_kv x T_cap x hd whatever B is
        return t.untyped_storage().nbytes() // (t.stride(0) * t.element_size())

    @torch.inference_mode()  # the tensors may be inference tensors (see `keep_rows`)
    def reset(self, batch: int) -> None:
        """Start a new batch of ``batch`` empty rows on the same tensors (static caches only): each
        presents the first ``batch`` rows of its storage, zeroed as a new cache would be, so every
        address a compiled graph recorded stays valid. Needs ``batch <= rows_held``."""
        if not self.static or batch > self.rows_held:
            raise ValueError(f"reset({batch}) needs a static cache holding >= {batch} rows")
        for t in self._blocks:
            t.set_(t.untyped_storage(), t.storage_offset(), (batch, *t.shape[1:]), t.stride())
            t.zero_()
        self._use(self._blocks)
        self.lengths = [0] * batch

    def _use(self, blocks: list[torch.Tensor]) -> None:
        """Hold ``blocks`` — 2L tensors (B, H_kv, T_cap, hd), or one (2L, B, H_kv, T_cap, hd) — as
        ``k`` (layers 0..L-1) and ``v`` (L..2L-1)."""
        self._blocks = blocks
        layers = [t for block in blocks for t in (block.unbind(0) if block.dim() == 5 else (block,))]
        self.k, self.v = layers[: self.n_layers], layers[self.n_layers :]

    def reserve(self, slots: int) -> None:
        """Make room for ``slots`` slots per row, doubling the capacity so growth stays rare.

        Committed slots keep their place; rows, lengths and dtype are unchanged. A compiled caller
        fixes its capacity beforehand (a new capacity is a new graph); if it grows anyway, the new
        tensors are marked static too.
        """
        if slots <= self.capacity:
            return
        capacity = self.capacity
        while capacity < slots:
            capacity *= 2
        grow = (0, 0, 0, capacity - self.capacity)  # pad dim -2 (slots) at its end
        self._use([F.pad(t, grow) for t in self._blocks])
        self.capacity = capacity
        self.room = self.batch

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new keys/values of one layer at per-row slots.

        slots: (B, N) long; k, v: (B, H_kv, N, hd).
        """
        write_entries(self.k[layer], self.v[layer], slots, k, v)

    def write_span(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """`write` when every row's slots are start .. start + N - 1: a slice copy, which on a CPU
        costs a fraction of the scattered write (the draft head's scratch entries, batch-1 context).

        k, v: (B, H_kv, N, hd).
        """
        n = k.shape[2]
        self.k[layer][:, :, start : start + n] = k
        self.v[layer][:, :, start : start + n] = v

    def view(self, layer: int, kv_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of one layer over slots [0, kv_len): (B, H_kv, kv_len, hd) each."""
        return self.k[layer][:, :, :kv_len], self.v[layer][:, :, :kv_len]

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
            device = self.k[0].device
            rows_t = torch.tensor(rows, device=device)
            src_t = torch.tensor(src, device=device)
            dst_t = torch.tensor(dst, device=device)
            for t in self._blocks:  # advanced indices on the row and slot dims put M first: (M, [2L,] H_kv, hd)
                t[..., rows_t, :, dst_t, :] = t[..., rows_t, :, src_t, :]

    def advance(self, counts: Sequence[int]) -> None:
        """Commit the ``counts[b]`` slots just written after each row's prefix where they lie
        (`commit` with identity paths, without walking them)."""
        self.lengths = [n + c for n, c in zip(self.lengths, counts, strict=True)]

    @torch.inference_mode()
    def add_rows(self, other: KVCache) -> None:
        """Append ``other``'s rows (requests prefilled apart, eager layout) after this cache's rows:
        continuous batching admits requests into a running batch at a step boundary.

        The rows land in storage that `keep_rows` freed when it can, so an admission copies only the
        newcomers' rows; storage that is full doubles its rows (one copy of the live rows).
        """
        if self.static or other.static:
            raise ValueError("add_rows needs eager caches: a compiled runner's static cache keeps its shapes")
        self.reserve(other.capacity)
        b, n = self.batch, other.batch
        if b + n > self.room:
            self._grow_rows(max(b + n, 2 * self.room))
        for t, o in zip(self._blocks, other._blocks, strict=True):
            t.set_(t.untyped_storage(), t.storage_offset(), (*t.shape[:-4], b + n, *t.shape[-3:]), t.stride())
            t.narrow(-4, b, n).narrow(-2, 0, other.capacity).copy_(o)
        self._use(self._blocks)
        self.lengths = self.lengths + other.lengths

    def _grow_rows(self, rows: int) -> None:
        """New storage of ``rows`` rows holding the live rows first (the tensors still show those)."""
        grown = []
        for t in self._blocks:
            with torch.inference_mode(t.is_inference()):  # an ordinary tensor stays one (`commit` runs outside)
                new = t.new_zeros((*t.shape[:-4], rows, *t.shape[-3:]))
            new.narrow(-4, 0, t.shape[-4]).copy_(t)
            grown.append(new.set_(new.untyped_storage(), 0, t.shape, new.stride()))
        self._use(grown)
        self.room = rows

    @torch.inference_mode()  # the tensors may be inference tensors (grown by `reserve` inside a forward)
    def keep_rows(self, rows: Sequence[int]) -> None:
        """Drop finished sequences so later forwards skip them (one copy per finish event).

        The kept rows move to the front of the same tensors (rows = [2, 0] copies rows 2, 0 to
        rows 0, 1), which then shrink to those first rows, so the cache's addresses stay put.
        """
        index = torch.tensor(list(rows), device=self.k[0].device)
        for t in self._blocks:
            t.narrow(-4, 0, len(rows)).copy_(t.index_select(-4, index))  # the gather copies before the write
            size = (*t.shape[:-4], len(rows), *t.shape[-3:])
            # Shrink the tensor itself rather than take a view: dynamo guards a view's base, so a view
            # would need graphs of its own, apart from those of a fresh batch of the same shape.
            t.set_(t.untyped_storage(), t.storage_offset(), size, t.stride())
        self._use(self._blocks)
        self.lengths = [self.lengths[r] for r in rows]


class PersistentCache:
    """A compiled runner's one static cache, which every batch reuses (module docstring).

    It grows — a new allocation, marked static on CUDA — only when a batch needs more rows or more
    capacity than it holds; a new size is a new graph anyway. ``allocations`` counts those, so a
    warm-up can tell whether the graphs it ran were recorded on the storage it holds now.
    """

    def __init__(
        self, n_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.shape = (n_layers, kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.cache: KVCache | None = None
        self.allocations = 0

    def take(self, batch: int, capacity: int) -> KVCache:
        """The cache, reset to ``batch`` empty rows of at least ``capacity`` slots. The caller owns
        it until its next `take`: one live batch at a time."""
        held = self.cache
        if held is None or held.rows_held < batch or held.capacity < capacity:
            rows = max(batch, held.rows_held if held else 0)
            n_layers, kv_heads, head_dim = self.shape
            capacity = max(capacity, held.capacity if held else 0)
            self.cache = held = KVCache(n_layers, rows, kv_heads, head_dim, capacity, self.dtype, self.device, static=True)
            self.allocations += 1
        held.reset(batch)
        return held
