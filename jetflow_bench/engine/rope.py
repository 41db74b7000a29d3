"""Rotary position embedding (RoPE), rotate-half convention (NeoX / Hugging Face Llama, Qwen).

One rotation for the target runner and the draft head. The target takes its cos/sin tables from
the loaded model's own rotary module, which knows the checkpoint's scaling rule; a draft head
builds default tables (`Rotary`) from its own theta, since released heads store only that.
"""

from __future__ import annotations

import torch
from torch import nn


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE: x (B, H, N, hd), cos/sin broadcastable to it (e.g. (B, 1, N, hd))."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Rotary(nn.Module):
    """cos/sin tables at absolute positions (default RoPE, base ``theta``)."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, N) -> cos, sin (B, 1, N, hd), broadcast over heads."""
        freqs = positions[..., None].float() * self.inv_freq  # (B, N, hd/2)
        angles = torch.cat([freqs, freqs], dim=-1)[:, None]  # (B, 1, N, hd)
        return angles.cos().to(dtype), angles.sin().to(dtype)
