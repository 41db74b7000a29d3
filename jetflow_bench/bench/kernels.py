"""`jfbench bench kernels`: every attention backend on tree-verification shapes, timed and checked.

Each case is a batch of random trees (N nodes, root included) after ragged committed prefixes:
row b's prefix is drawn uniformly from [L/2, L], row 0's is exactly L, so kv_len = L + N. Every
backend attends the same q/k/v under the same `TreeMask`; its error is the max |difference| from
SDPA run in fp32 on the same (rounded) inputs, over real tree nodes. Times are medians of
``repeats`` calls after warm-up, with a device sync before each clock read; the mask's derived form
(dense additive mask, packed bits, FlexAttention block mask) is built once per forward and shared by
every layer, so it is timed separately ("prep").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from jetflow_bench.core.runtime import synchronize
from jetflow_bench.engine.attention import get_attention, sdpa_attention
from jetflow_bench.engine.tree import DraftTree, ancestor_mask, pad_trees
from jetflow_bench.kernels.mask import TreeMask


def prepare(backend: str, mask: TreeMask) -> object:
    """What ``backend`` derives from a mask before attending (built once per forward)."""
    if backend == "sdpa":
        return mask.additive()
    if backend == "triton":
        return mask.bits()
    from jetflow_bench.kernels.flex import block_mask

    return block_mask(mask)


@dataclass(frozen=True)
class KernelRow:
    batch: int
    tree: int  # N, nodes per row incl. the root
    prefix: int  # L, the longest committed prefix
    backend: str
    ms: float  # median time of one attention call (one layer)
    prep_ms: float  # building the backend's mask form, once per forward
    max_err: float  # vs fp32 SDPA, over real nodes

    def to_dict(self) -> dict:
        return asdict(self)


def random_trees(batch: int, size: int, gen: torch.Generator) -> list[DraftTree]:
    """Row 0 has ``size`` nodes; the others 1..size, each node's parent uniform among earlier nodes."""
    trees = []
    for row in range(batch):
        n = size if row == 0 else int(torch.randint(1, size + 1, (), generator=gen))
        parents = [-1] + [int(torch.randint(0, i, (), generator=gen)) for i in range(1, n)]
        trees.append(DraftTree([0] * n, parents))
    return trees


def tree_case(
    batch: int, size: int, prefix: int, gen: torch.Generator, device: torch.device, dtype: torch.dtype
) -> tuple[TreeMask, torch.Tensor]:
    """(mask, valid (B, N) bool) for random trees after ragged prefixes (see the module docstring)."""
    _, parents, depths, valid = pad_trees(random_trees(batch, size, gen))
    lengths = torch.randint(prefix // 2, prefix + 1, (batch,), generator=gen)
    lengths[0] = prefix
    mask = TreeMask.for_tree(ancestor_mask(parents, depths).to(device), lengths.to(device), prefix + size, dtype)
    return mask, valid.to(device)


def _median_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_case(
    batch: int, size: int, prefix: int, backends: Sequence[str], heads: tuple[int, int, int],
    dtype: torch.dtype, device: torch.device, repeats: int, seed: int = 0,
) -> list[KernelRow]:
    """One (batch, tree size, prefix) case through every backend; heads = (H_q, H_kv, head_dim)."""
    gen = torch.Generator().manual_seed(seed)
    hq, hkv, hd = heads
    mask, valid = tree_case(batch, size, prefix, gen, device, dtype)
    t = mask.kv_len
    q = torch.randn(batch, hq, size, hd, generator=gen).to(device, dtype)
    k = torch.randn(batch, hkv, t, hd, generator=gen).to(device, dtype)
    v = torch.randn(batch, hkv, t, hd, generator=gen).to(device, dtype)
    scale = hd**-0.5
    ref_mask = TreeMask(mask.prefix_lens, mask.entry_start, mask.entries, t, torch.float32)
    reference = sdpa_attention(q.float(), k.float(), v.float(), ref_mask, scale)  # (B, H_q, N, hd)
    real = valid[:, None, :, None].expand_as(reference)
    rows = []
    for name in backends:
        attend = get_attention(name, device)
        def fresh() -> TreeMask:  # a new mask has no derived forms yet
            return TreeMask(mask.prefix_lens, mask.entry_start, mask.entries, t, dtype)

        prep_ms = _median_ms(lambda n=name, f=fresh: prepare(n, f()), 3, device)
        shared = fresh()
        with torch.inference_mode():
            out = attend(q, k, v, shared, scale)  # warm-up (compiles where the backend compiles)
            err = float((out.float() - reference).abs()[real].max())
            ms = _median_ms(lambda a=attend, m=shared: a(q, k, v, m, scale), repeats, device)
        rows.append(KernelRow(batch, size, prefix, name, ms, prep_ms, err))
    return rows
