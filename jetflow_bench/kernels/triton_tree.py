"""Tree attention in Triton: ragged prefixes, a bit-packed entry mask, GQA, fp32 online softmax.

One program handles a tile of ``BLOCK_M`` rows of one (batch row, KV head): the G = H_q / H_kv query
heads that share the KV head are packed into the rows (row r = node r // G, head r % G), so each K/V
tile is loaded once for the whole group. It walks the keys in three phases:

1. prefix tiles below the shortest prefix of its rows: every key is visible — no mask is built;
2. prefix tiles up to the longest prefix: key t is visible to row i iff t < prefix_len[i];
3. entry tiles [S, S + E): visibility is bit j % 32 of word j // 32 of the row's packed mask.

Keys between a row's prefix and its entries are never loaded. The softmax runs online in fp32
(base 2) whatever the input dtype; a tile in which a row sees nothing adds exactly zero to that row
(the running maximum is kept finite for the exponentials), and a row that sees no key at all gets
zeros, not NaN.

Under ``TRITON_INTERPRET=1`` (CPU) inputs are converted to fp32 on load, because arithmetic on
bf16/fp16 values is wrong in the interpreter; on a GPU the dot products take the input dtype and
accumulate in fp32, and fp32 inputs use IEEE products (no TF32), so fp32 stays exact. K tiles are
loaded already transposed, (D, BLOCK_N): the interpreter's dot on a transposed view is ~100x slower.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from jetflow_bench.kernels.mask import TreeMask

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e))
GPU_TILE = 64  # BLOCK_M = BLOCK_N on a GPU (query rows x keys per tile)
INTERPRETER_TILE = 256  # the interpreter pays per operation, so fewer, larger tiles


@triton.jit
def _tree_attention_fwd(
    Q, K, V, Out,  # (B, H_q, N, D), (B, H_kv, T, D) x 2, (B, H_q, N, D) — any strides
    PrefixLens, EntryStart, Bits,  # (B, N) int32, (B,) int32, (B, N, W) int32 contiguous
    qk_scale,  # softmax scale * log2(e)
    N, E, W,
    sqb, sqh, sqn, sqd,
    skb, skh, skt, skd,
    svb, svh, svt, svd,
    sob, soh, son, sod,
    GROUP: tl.constexpr,  # query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter: compute in fp32 from the loads on
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)  # 64-bit offsets: a whole KV cache can exceed 2^31 elements
    kvh = tl.program_id(2)

    rows = tl.arange(0, BLOCK_M)
    nodes_per_tile = BLOCK_M // GROUP
    node = tile * nodes_per_tile + rows // GROUP  # (BLOCK_M,)
    head = kvh * GROUP + rows % GROUP
    row_ok = (rows < nodes_per_tile * GROUP) & (node < N)
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM

    q = tl.load(
        Q + b * sqb + head[:, None] * sqh + node[:, None] * sqn + dims[None, :] * sqd,
        mask=row_ok[:, None] & dim_ok[None, :], other=0.0,
    )  # (BLOCK_M, BLOCK_D)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + b * skb + kvh * skh
    v_base = V + b * svb + kvh * svh

    prefix = tl.load(PrefixLens + b * N + node, mask=row_ok, other=0)  # (BLOCK_M,)
    big = 2147483647
    lo = tl.min(tl.where(row_ok, prefix, big), axis=0)
    hi = tl.max(tl.where(row_ok, prefix, 0), axis=0)
    lo = lo - lo % BLOCK_N  # phase 1 ends on a tile boundary

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of scores (log2 units)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(score - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    cols = tl.arange(0, BLOCK_N)

    # Phase 1: prefix tiles every row sees in full — no masks at all.
    for start in range(0, lo, BLOCK_N):
        keys = start + cols
        kt = tl.load(k_base + keys[None, :] * skt + dims[:, None] * skd, mask=dim_ok[:, None], other=0.0)
        v = tl.load(v_base + keys[:, None] * svt + dims[None, :] * svd, mask=dim_ok[None, :], other=0.0)
        if UPCAST:
            kt, v = kt.to(tl.float32), v.to(tl.float32)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # Phase 2 (prefix tiles some rows see only in part) and phase 3 (entries) share one masked update.
    entry_start = tl.load(EntryStart + b)
    n_prefix_tiles = tl.cdiv(hi - lo, BLOCK_N)
    for i in range(0, n_prefix_tiles + tl.cdiv(E, BLOCK_N)):
        if i < n_prefix_tiles:
            keys = lo + i * BLOCK_N + cols
            key_ok = keys < hi
            visible = keys[None, :] < prefix[:, None]
        else:
            j = (i - n_prefix_tiles) * BLOCK_N + cols  # entry index
            key_ok = j < E
            keys = entry_start + j
            words = tl.load(
                Bits + (b * N + node[:, None]) * W + (j[None, :] >> 5),
                mask=row_ok[:, None] & key_ok[None, :], other=0,
            )
            visible = ((words >> (j[None, :] & 31)) & 1) != 0
        visible = visible & row_ok[:, None] & key_ok[None, :]
        kt = tl.load(k_base + keys[None, :] * skt + dims[:, None] * skd, mask=dim_ok[:, None] & key_ok[None, :], other=0.0)
        v = tl.load(v_base + keys[:, None] * svt + dims[None, :] * svd, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        if UPCAST:
            kt, v = kt.to(tl.float32), v.to(tl.float32)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet
        p = tl.exp2(qk - m_safe[:, None])  # exp2(-inf) = 0 for hidden keys
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # rows that saw no key: 0, not 0/0
    tl.store(
        Out + b * sob + head[:, None] * soh + node[:, None] * son + dims[None, :] * sod,
        out.to(Out.dtype.element_ty),
        mask=row_ok[:, None] & dim_ok[None, :],
    )


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def tree_attention(
    q: torch.Tensor,  # (B, H_q, N, D)
    k: torch.Tensor,  # (B, H_kv, T, D)
    v: torch.Tensor,  # (B, H_kv, T, D)
    mask: TreeMask | None,  # None: every query sees every key
    scale: float,
    block_m: int | None = None,  # rows (node x group head) per program; power of 2, >= 16
    block_n: int | None = None,  # keys per tile; power of 2, >= 16
) -> torch.Tensor:  # (B, H_q, N, D), a transposed view of a (B, N, H_q, D) buffer
    """Attention of N queries per row over [prefix ; entries] under ``mask`` (see the module docstring).

    Default tiles: 64 x 64 on a GPU; 256 x 256 in the interpreter, whose cost is per operation, not
    per element (tests pass small tiles to cover tile boundaries).
    """
    b, hq, n, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of KV heads ({hkv})")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        raise RuntimeError("the Triton tree-attention kernel has no backward: train with the sdpa backend")
    if mask is None:
        mask = TreeMask.full(b, n, t, q.dtype, q.device)
    if mask.kv_len > t or mask.sizes[:2] != (b, n):
        raise ValueError(f"mask {mask.sizes} over {mask.kv_len} keys does not fit q {tuple(q.shape)}, k {tuple(k.shape)}")
    group = hq // hkv
    upcast = interpreting()
    tile = INTERPRETER_TILE if upcast else GPU_TILE
    block_m = max(block_m or tile, triton.next_power_of_2(group))
    block_n = block_n or tile
    nodes_per_tile = block_m // group
    prefix = mask.cached("prefix_i32", lambda: mask.prefix_lens.to(torch.int32).contiguous())
    start = mask.cached("start_i32", lambda: mask.entry_start.to(torch.int32).contiguous())
    bits = mask.bits()
    out = torch.empty(b, n, hq, d, dtype=q.dtype, device=q.device).transpose(1, 2)  # (B, H_q, N, D) view
    grid = (triton.cdiv(n, nodes_per_tile), b, hkv)
    _tree_attention_fwd[grid](
        q, k, v, out, prefix, start, bits,
        scale * LOG2E, n, mask.sizes[2], bits.shape[2],
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        GROUP=group, HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=upcast, DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else "tf32",
    )
    return out
