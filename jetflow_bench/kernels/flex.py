"""Tree attention through torch FlexAttention: a third implementation, and the fast path without Triton.

The mask function only looks things up — the row's prefix length and the precomputed entry table
of `TreeMask` (a node's ancestors, or a block's pattern). Walking parent pointers inside it would
make Inductor unroll the walk, which hangs compilation beyond a depth of about five.

On CUDA the attention runs compiled (the first calls compile for seconds, then the kernel is
reused as lengths change). On a CPU it runs eagerly — correct, unfused, and slower than SDPA: use it there to
cross-check, not to time.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from jetflow_bench.kernels.mask import TreeMask


def block_mask(mask: TreeMask) -> BlockMask:
    """FlexAttention's block mask for ``mask`` (built once per forward, shared by the layers)."""
    prefix, start, table = mask.prefix_lens, mask.entry_start, mask.entries  # (B, N), (B,), (B, N, E)
    b, n, e = mask.sizes
    last = max(e - 1, 0)

    def visible(batch, head, q_idx, kv_idx):
        j = kv_idx - start[batch]  # entry index of this key (negative in the prefix)
        in_entries = (j >= 0) & (j < e)
        sees_entry = table[batch, q_idx, j.clamp(0, last)] if e else torch.zeros_like(in_entries)
        return (kv_idx < prefix[batch, q_idx]) | (in_entries & sees_entry)

    return create_block_mask(visible, b, None, n, mask.kv_len, device=mask.entries.device)


@functools.cache
def _compiled():
    # Default dynamism: the key count grows every decode step, so after the first recompile torch
    # marks the changing sizes dynamic instead of compiling once per length.
    return torch.compile(flex_attention)


def flex_tree_attention(
    q: torch.Tensor,  # (B, H_q, N, D)
    k: torch.Tensor,  # (B, H_kv, T, D)
    v: torch.Tensor,  # (B, H_kv, T, D)
    mask: TreeMask | None,  # None: every query sees every key
    scale: float,
) -> torch.Tensor:  # (B, H_q, N, D)
    if mask is None:
        mask = TreeMask.full(q.shape[0], q.shape[2], k.shape[2], q.dtype, q.device)
    k, v = k[:, :, : mask.kv_len], v[:, :, : mask.kv_len]
    blocks = mask.cached("flex_block_mask", lambda: block_mask(mask))
    gqa = q.shape[1] != k.shape[1]
    if q.device.type == "cuda":
        return _compiled()(q, k, v, block_mask=blocks, scale=scale, enable_gqa=gqa)
    with warnings.catch_warnings():  # eager on CPU by choice (see the module docstring)
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=blocks, scale=scale, enable_gqa=gqa)
