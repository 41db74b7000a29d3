"""Token streams for training and the held-out check, and the seeded window sampler.

Each source becomes one stream of token ids (its documents back to back, EOS after each segment).
A training batch picks a source per row by the preset's mixture weights and a random window in it,
so a small source (MBPP) can be up-weighted without copying it, and a huge one (ShareGPT) capped.
Held-out documents are split off per source before the tokenizer is trained, so they are unseen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.toy.corpus import Document
from jetflow_bench.toy.tokenizer import encode_segments


def split_heldout(docs: list[Document], fraction: float, seed: int) -> tuple[list[Document], list[Document]]:
    """(train, heldout): a seeded shuffle, then `fraction` of the documents (>= 1 when there are 2+) held out."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_heldout = min(max(1, round(fraction * len(docs))), len(docs) - 1)
    heldout = sorted(order[:n_heldout])
    train = sorted(order[n_heldout:])
    return [docs[i] for i in train], [docs[i] for i in heldout]


def tokenize_stream(tokenizer: PreTrainedTokenizerFast, docs: list[Document]) -> torch.Tensor:
    """All segments of `docs` as one stream, EOS after each segment. Returns (N,) int64."""
    segments = [seg for doc in docs for seg in doc]
    if not segments:
        return torch.empty(0, dtype=torch.long)
    ids = encode_segments(tokenizer, segments)
    return torch.tensor([tok for seg in ids for tok in seg], dtype=torch.long)  # (N,)


@dataclass
class WindowSampler:
    """Draws (B, T) training windows from per-source streams by mixture weight."""

    streams: dict[str, torch.Tensor]  # source -> (N_s,) int64 token ids
    weights: dict[str, float]  # source -> sampling probability (sums to 1)

    def __post_init__(self) -> None:
        self._names = list(self.streams)
        self._probs = torch.tensor([self.weights[name] for name in self._names], dtype=torch.float64)

    def sample(self, batch_size: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
        """(B, T) token ids; a stream shorter than T is repeated to fill a window."""
        sources = torch.multinomial(self._probs, batch_size, replacement=True, generator=generator)  # (B,)
        rows = []
        for src in sources.tolist():
            stream = self.streams[self._names[src]]
            if len(stream) < seq_len:
                stream = stream.repeat(seq_len // len(stream) + 1)
            start = int(torch.randint(0, len(stream) - seq_len + 1, (1,), generator=generator))
            rows.append(stream[start : start + seq_len])
        return torch.stack(rows)  # (B, T)


def mixture_weights(available: list[str], mixture: tuple[tuple[str, float], ...]) -> dict[str, float]:
    """The preset's weights for the sources present, renormalised to sum to 1."""
    table = dict(mixture)
    missing = [name for name in available if name not in table]
    if missing:
        raise JfbenchError(f"preset mixture has no weight for source(s) {', '.join(missing)}")
    total = sum(table[name] for name in available)
    return {name: table[name] / total for name in available}


def heldout_windows(stream: torch.Tensor, seq_len: int, max_windows: int) -> torch.Tensor:
    """Up to `max_windows` non-overlapping windows from the start of a (N >= 2,) stream. Returns (W, T<=seq_len)."""
    length = min(seq_len, len(stream))
    count = max(1, min(max_windows, len(stream) // length))
    return stream[: count * length].view(count, length)  # (W, T)
