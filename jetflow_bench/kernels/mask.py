"""The mask every attention backend receives: who may attend to whom, without a dense float mask.

Every forward of the target and of the draft heads attends over keys laid out, per row, as

    key slot   0 .. P_i - 1     ...          S .. S + E - 1      ...
               prefix           blocked      entries             blocked

* the **prefix** (committed context): query i of row b sees keys [0, prefix_lens[b, i]) in full;
* the **entries** (tree nodes or draft-block entries) start at slot S = entry_start[b]; query i sees
  entry j iff ``entries[b, i, j]`` (a node's ancestors and itself, or a block's causal / bidirectional
  pattern). Every prefix ends at or before its row's S.

Worked example — target verify, one row with 3 committed tokens, tree root -> {a, b}, a -> c:

    prefix_lens = [3, 3, 3, 3], entry_start = 3, kv_len = 7
    slot      0 1 2 | 3    4 5 6
    root      x x x | x    . . .
    a         x x x | x    x . .
    b         x x x | x    . x .          (never its sibling a)
    c         x x x | x    x . x

Backends read the form they need, each built once per forward and shared by every layer:
``additive()`` (SDPA: a (B, 1, N, kv_len) float mask), ``bits()`` (Triton: one row of 32-bit words
per query, bit j of word j // 32 = sees entry j) and the boolean ``entries`` table (FlexAttention).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

WORD_BITS = 32  # entries per packed word of ``bits()``


@dataclass(eq=False)
class TreeMask:
    """See the module docstring. Only the boolean structure is stored; dense forms are derived."""

    prefix_lens: torch.Tensor  # (B, N) long: query i sees keys [0, prefix_lens[b, i])
    entry_start: torch.Tensor  # (B,) long: key slot of entry 0 of each row
    entries: torch.Tensor  # (B, N, E) bool: query i sees entry j
    kv_len: int  # keys in the attended tensors
    dtype: torch.dtype  # of the additive form (the model's)
    _cache: dict = field(default_factory=dict, repr=False)  # derived forms, built on first use

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(B, N, E): rows, queries, entries (not the key count: that is ``kv_len``)."""
        return tuple(self.entries.shape)  # type: ignore[return-value]

    @classmethod
    def for_tree(cls, ancestors: torch.Tensor, lengths: torch.Tensor, kv_len: int, dtype: torch.dtype) -> TreeMask:
        """Target verification: row b's tree (ancestors (B, N, N)) sits right after its committed
        prefix of ``lengths[b]`` slots (lengths (B,))."""
        b, n, _ = ancestors.shape
        return cls(lengths[:, None].expand(b, n), lengths, ancestors, kv_len, dtype)

    @classmethod
    def for_block(cls, context: torch.Tensor, entries: torch.Tensor, dtype: torch.dtype) -> TreeMask:
        """Draft head: context (B, N, T) bool whose rows are prefixes (entry i sees positions < some
        limit, as ``jetflow_bench.heads.masks.context_allowed`` builds them) and entries (B, N, E) or (N, E)
        stored right after the T context slots."""
        return cls.after_prefixes(context.sum(-1), context.shape[-1], entries, dtype)

    @classmethod
    def after_prefixes(
        cls, prefix_lens: torch.Tensor, context_len: int, entries: torch.Tensor, dtype: torch.dtype
    ) -> TreeMask:
        """`for_block` given each query's prefix length (B, N) instead of its (B, N, T) context row:
        what an inference head knows without building the boolean rows."""
        b, n = prefix_lens.shape
        entries = entries.expand(b, n, entries.shape[-1])
        start = torch.full((b,), context_len, dtype=torch.long, device=prefix_lens.device)
        return cls(prefix_lens, start, entries, context_len + entries.shape[-1], dtype)

    @classmethod
    def full(cls, batch: int, queries: int, kv_len: int, dtype: torch.dtype, device: torch.device) -> TreeMask:
        """Every query sees every key (a plain decode step of one row needs no mask)."""
        lens = torch.full((batch, queries), kv_len, dtype=torch.long, device=device)
        start = torch.full((batch,), kv_len, dtype=torch.long, device=device)
        return cls(lens, start, torch.zeros(batch, queries, 0, dtype=torch.bool, device=device), kv_len, dtype)

    def allowed(self) -> torch.Tensor:
        """(B, N, kv_len) bool, the dense form (the reference every backend must agree with)."""
        if "allowed" not in self._cache:
            b, n, e = self.sizes
            keys = torch.arange(self.kv_len, device=self.entries.device)
            dense = (keys < self.prefix_lens[..., None]).clone()  # (B, N, kv_len)
            if e:
                slots = (self.entry_start[:, None] + torch.arange(e, device=keys.device))[:, None, :]  # (B, 1, E)
                dense.scatter_(2, slots.expand(b, n, e), self.entries)  # entry j lives at slot S + j
            self._cache["allowed"] = dense
        return self._cache["allowed"]

    def additive(self) -> torch.Tensor:
        """(B, 1, N, kv_len) float: 0 = attend, dtype-min = blocked.

        Boolean masks are silently wrong with some attention implementations (they get added to
        the scores), so SDPA receives the additive form.
        """
        if "additive" not in self._cache:
            blocked = torch.finfo(self.dtype).min
            allowed = self.allowed()
            mask = torch.zeros(allowed.shape, dtype=self.dtype, device=allowed.device).masked_fill_(~allowed, blocked)
            self._cache["additive"] = mask[:, None]
        return self._cache["additive"]

    def bits(self) -> torch.Tensor:
        """(B, N, W) int32 with W = ceil(E / 32) (at least 1): bit (j % 32) of word j // 32 = sees entry j.

        Worked example, E = 3, entries of one query = [1, 0, 1] -> word 0 = 0b101 = 5.
        """
        if "bits" not in self._cache:
            b, n, e = self.sizes
            words = max(1, -(-e // WORD_BITS))
            padded = torch.zeros(b, n, words * WORD_BITS, dtype=torch.int64, device=self.entries.device)
            padded[..., :e] = self.entries.long()
            weights = 2 ** torch.arange(WORD_BITS, dtype=torch.int64, device=padded.device)  # (32,)
            packed = (padded.view(b, n, words, WORD_BITS) * weights).sum(-1)  # (B, N, W) in [0, 2^32)
            # Reinterpret as signed 32-bit (bit 31 set -> negative) rather than rely on overflowing casts.
            self._cache["bits"] = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32).contiguous()
        return self._cache["bits"]

    def cached(self, key: str, build):
        """A backend's own derived form (e.g. a FlexAttention block mask), built once per mask."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]
