"""The target's sampling distribution and the random numbers that draw from it (pure functions).

`SamplingParams` fixes the distribution: logits / temperature, then top-k, then top-p (nucleus),
the order Hugging Face `generate` and vLLM apply them. Temperature 0 is greedy decoding: the
distribution is the point mass on the argmax (first maximum on exact ties, like `argmax`).

Random numbers come from one stream per request, seeded from (seed, request id): `RandomStreams`
holds U[r, t] ~ Uniform[0, 1), the number that draws generated token t of request r. Every arm
draws token t with the same U[r, t], whichever verify step and tree node it is drawn at, so runs
are reproducible on the CPU, independent of batch size, and — because a draw is a deterministic
function of (distribution, U[r, t]) — AR sampling and every drafter emit the same tokens for the
same seed up to floating-point differences in the target's logits (see `speculative_sampling`).

A draw is the inverse CDF in token-id order: the smallest token y with F(y) > u, where
F(y) = p(0) + ... + p(y). Worked example: p = [0.2, 0.0, 0.5, 0.3], u = 0.65 -> F = [0.2, 0.2,
0.7, 1.0] -> y = 2. Tokens with p = 0 are never drawn.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from jetflow_bench.core.errors import JfbenchError


@dataclass(frozen=True)
class SamplingParams:
    """How the target's next token is chosen. The defaults are greedy decoding."""

    temperature: float = 0.0  # 0 = greedy (argmax); > 0 divides the logits before the softmax
    top_p: float = 1.0  # keep the most likely tokens until their mass reaches top_p (1 = all)
    top_k: int = 0  # keep the k most likely tokens (0 = all)
    seed: int = 0  # with each request's id, seeds that request's random stream

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise JfbenchError(f"--temperature {self.temperature}: use a finite temperature >= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            raise JfbenchError(f"--top-p {self.top_p}: use 0 < top-p <= 1 (1 keeps every token)")
        if self.top_k < 0:
            raise JfbenchError(f"--top-k {self.top_k}: use top-k >= 0 (0 keeps every token)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "seed": self.seed}


GREEDY = SamplingParams()


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(..., V) logits -> (..., V) float32 probabilities of the next token under ``params``.

    Top-k keeps the k largest logits; top-p then keeps the smallest set of the most likely tokens
    whose mass reaches top_p (always at least the most likely one); both renormalise. Greedy
    returns the one-hot of the argmax.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    scaled = logits / params.temperature  # (..., V)
    if 0 < params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest logit
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    probs = torch.softmax(scaled, dim=-1)  # (..., V)
    if params.top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)  # (..., V) each
        before = sorted_p.cumsum(-1) - sorted_p  # mass of the more likely tokens
        drop_sorted = before >= params.top_p  # the nucleus is already full without this token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw from (..., V) ``probs`` (rows need not sum to 1) with (...) uniforms ``u`` in [0, 1).

    Returns (...) long: the smallest token y with cumsum(probs)[y] > u * total (module docstring).
    A row whose every probability is 0 (a padding node) draws token 0.
    """
    cdf = probs.double().cumsum(-1)  # (..., V) float64: fewer rounding flips between equal rows
    total = cdf[..., -1:]  # (..., 1)
    y = torch.searchsorted(cdf, u.double().unsqueeze(-1) * total, right=True).squeeze(-1)  # (...)
    # u * total can round up to total; then fall back to the last token that has mass.
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)  # (...)
    return torch.minimum(y, last)


def draw(logits: torch.Tensor, u: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The target's token after each row of (..., V) ``logits``, drawn with (...) uniforms ``u``.

    Greedy is the argmax: the inverse CDF of a point mass returns its atom for every u, so the
    argmax is the same draw without building the one-hot (tested against `inverse_cdf`).
    """
    if params.greedy:
        return logits.argmax(-1)
    return inverse_cdf(target_probs(logits, params), u.to(logits.device))


def stream_seed(seed: int, request: int) -> int:
    """A 63-bit generator seed for request ``request`` of a run seeded ``seed`` (stable everywhere)."""
    digest = hashlib.sha256(f"jfbench-sampling:{seed}:{request}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class RandomStreams:
    """U[r, t] for the requests of one batch: the uniform that draws generated token t of request r."""

    def __init__(self, seed: int, requests: Sequence[int], length: int, device: torch.device | str = "cpu") -> None:
        rows = []
        for request in requests:
            gen = torch.Generator().manual_seed(stream_seed(seed, request))
            rows.append(torch.rand(length, generator=gen, dtype=torch.float64))
        self.u = (torch.stack(rows) if rows else torch.zeros(0, length, dtype=torch.float64)).to(device)  # (R, L)

    def at(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """U[rows[i], positions[i, ...]]: ``rows`` (B,) batch rows, ``positions`` (B, ...) token indices."""
        flat = positions.reshape(positions.shape[0], -1)  # (B, M)
        return self.u[rows[:, None], flat].reshape(positions.shape)
