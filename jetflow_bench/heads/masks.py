"""Attention masks of the draft head (pure functions, bool in / structural `TreeMask` out).

Every head forward attends over [context ; entries]. The context part lets an entry see committed
positions before its block's anchor; the entry part is one of three modes:

    causal         entry j sees entries 0..j of its block         (chain: ancestors = earlier entries)
    bidirectional  entry j sees every entry of its block          (DFlash's block diffusion; ``--head diffusion`` is an alias)
    tree           entry j sees itself and its tree ancestors     (never a sibling or a descendant)

Worked example, two blocks of three entries, causal (x = may attend):

    entries  b0e0 b0e1 b0e2 b1e0 b1e1 b1e2
    b0e2      x    x    x    .    .    .
    b1e1      .    .    .    x    x    .
"""

from __future__ import annotations

import functools

import torch

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.tree import ancestor_mask
from jetflow_bench.kernels.mask import TreeMask

BLOCK_MODES = ("causal", "bidirectional")


def block_allowed(mode: str, n_blocks: int, block_len: int, device: torch.device | None = None) -> torch.Tensor:
    """(n_blocks * block_len, n_blocks * block_len) bool for ``n_blocks`` independent blocks.

    Cached: every drafting step of a block head asks for the same one. Callers must not write to it.
    """
    return _block_allowed(mode, n_blocks, block_len, None if device is None else torch.device(device))


@functools.lru_cache(maxsize=64)
def _block_allowed(mode: str, n_blocks: int, block_len: int, device: torch.device | None) -> torch.Tensor:
    if mode == "causal":
        inner = torch.ones(block_len, block_len, dtype=torch.bool, device=device).tril()
    elif mode == "bidirectional":
        inner = torch.ones(block_len, block_len, dtype=torch.bool, device=device)
    else:
        raise JfbenchError(f"block attention mode {mode!r} is unknown: choose one of {', '.join(BLOCK_MODES)}")
    eye = torch.eye(n_blocks, dtype=torch.bool, device=device)
    return torch.kron(eye.int(), inner.int()).bool()


def block_layout(block_len: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(offsets (n,), is_mask (n,)) of one inference block [anchor, MASK x (n - 1)].

    Cached like `block_allowed`: every drafting step of a block head lays out the same block.
    Callers must not write to them.
    """
    return _block_layout(block_len, None if device is None else torch.device(device))


@functools.lru_cache(maxsize=16)
def _block_layout(block_len: int, device: torch.device | None) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = torch.arange(block_len, device=device)
    return offsets, offsets > 0


def tree_allowed(parents: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
    """(B, N, N) bool: each entry sees itself and its ancestors (tree mode)."""
    return ancestor_mask(parents, depths)


def context_allowed(limits: torch.Tensor, context_len: int) -> torch.Tensor:
    """limits (B, N): entry i may see context positions < limits[b, i] -> (B, N, T) bool."""
    return torch.arange(context_len, device=limits.device) < limits[..., None]


def join(context: torch.Tensor, entries: torch.Tensor, dtype: torch.dtype) -> TreeMask:
    """Context (B, N, T) and entry (B, N, E) or (N, E) permissions -> the mask over [context ; entries].

    Context rows must be prefixes (``context_allowed`` builds them so); every attention backend,
    SDPA's dense (B, 1, N, T + E) additive form included, is derived from the result.
    """
    return TreeMask.for_block(context, entries, dtype)
