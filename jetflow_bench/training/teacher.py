"""The frozen target's view of the training data, computed once per data set and kept on disk.

The target never changes during training, so its tapped hidden states, its final hidden state
(the LM head's input) and its greedy next token are computed for every training token ONCE —
through the same ``TargetRunner.score`` path that feeds the drafter at inference, so the head
trains on exactly the features it will see when drafting — and memory-mapped from
``<cache>/teacher/<key>/`` (key: target weights, the sequences, the taps, dtype and device type).
Every step, head, seed or resumed run on the same data reuses it; a step reads its batch's rows
and computes the target's logits only at the positions the loss supervises (one matmul with the
target's LM head, restricted to the head's draft vocabulary when it has one), instead of a target
forward plus a full-vocabulary LM head over every token of the batch.

Disk: (K + 1) x hidden x 4 bytes per token (e.g. 3 taps, hidden 576: 9.2 kB; 131k tokens: 1.2 GB).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from filelock import FileLock
from numpy.lib.format import open_memmap

from jetflow_bench.core import runtime
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.core.progress import say
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.heads.head import ConcatKV, DraftHead
from jetflow_bench.training.data import Sample, progress_steps
from jetflow_bench.training.losses import distill_loss

CACHE_FORMAT = 1
SCORE_TOKENS = 2048  # tokens per target forward while building the cache (padding included)


@dataclass
class TeacherBatch:
    tokens: torch.Tensor  # (B, T) right-padded token ids
    lengths: torch.Tensor  # (B,) real tokens per row
    prompt_lengths: torch.Tensor  # (B,) leading prompt tokens per row: context only, never predicted
    taps: torch.Tensor  # (B, T, K, H) tapped layer outputs, in the head's tap order
    final: torch.Tensor  # (B, T, H) the target's final normed hidden state: its logits are one matmul away
    argmax: torch.Tensor  # (B, T) long: the target's greedy choice of token t+1
    supervised: int = 0  # positions the loss has covered so far (`distill` counts them)

    @property
    def positions(self) -> torch.Tensor:
        """(B, T) absolute positions."""
        b, t = self.tokens.shape
        return torch.arange(t, device=self.tokens.device).expand(b, t)

    def random_positions(self, count: int, room: int, generator: torch.Generator) -> torch.Tensor:
        """(B, count) uniform positions p in [max(1, prompt_len - 1), len - 1 - room] per row: the
        token after p is continuation (so is everything predicted from p onwards) and ``room``
        real tokens follow p."""
        first = (self.prompt_lengths.cpu() - 1).clamp(min=1)  # (B,)
        last = torch.maximum(self.lengths.cpu() - 1 - room, first)  # (B,)
        picks = first[:, None] + (torch.rand(len(last), count, generator=generator) * (last - first + 1)[:, None]).long()
        return picks.to(self.tokens.device)

    def teacher_logits(self, head: DraftHead, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The target's logits (M, V) at positions ``cols`` of rows ``rows`` — (M, N) over the head's
        draft vocabulary when it has one — from its final hidden state and LM head, once per
        distinct position (at most B x T rows however many blocks overlap)."""
        t = self.final.shape[1]
        where, again = torch.unique(rows * t + cols, return_inverse=True)  # overlapping blocks share rows
        return F.linear(self.final.flatten(0, 1)[where], *head.lm_rows()).float()[again]

    def distill(
        self, head: DraftHead, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, weights: torch.Tensor,
        kind: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, top-1 agreement) of the head's outputs ``hidden`` (M, H), each predicting the token
        after position ``cols`` of row ``rows`` (M,) against the target's distribution there.

        A head with a draft vocabulary is distilled against the target's distribution restricted
        to those tokens and renormalised (EAGLE-3's recipe); its agreement is with the target's
        own argmax over the whole vocabulary, so a token outside the draft vocabulary counts as a miss.
        """
        self.supervised += len(rows)
        draft = head.logits(hidden)  # (M, V) or (M, N)
        loss, _ = distill_loss(draft, self.teacher_logits(head, rows, cols), weights, kind)
        agree = (head.to_target(draft.argmax(-1)) == self.argmax[rows, cols]).float().mean()
        return loss, agree

    def context(self, head: DraftHead) -> tuple[torch.Tensor, ConcatKV]:
        """Fused features (B, T, H) of every position and a store holding their keys/values."""
        fused = head.fuse(self.taps)
        return fused, ConcatKV(head.context_kv(fused, self.positions))


class TeacherCache:
    """The target's per-token features of a fixed list of training samples, memory-mapped from disk."""

    def __init__(self, folder: Path, samples: list[Sample], target: TargetRunner) -> None:
        self.folder = folder
        self.samples = samples
        self.device, self.dtype = target.device, target.dtype
        self.offsets = np.cumsum([0, *(len(s.tokens) for s in samples)])  # sample i = rows offsets[i]:offsets[i+1]
        self.taps = np.load(folder / "taps.npy", mmap_mode="r")  # (tokens, K, H) float32
        self.final = np.load(folder / "final.npy", mmap_mode="r")  # (tokens, H) float32
        self.argmax = np.load(folder / "argmax.npy", mmap_mode="r")  # (tokens,) int32

    @classmethod
    def ensure(
        cls, target: TargetRunner, samples: list[Sample], taps: Sequence[int], show_progress: bool = True
    ) -> TeacherCache:
        """The cache for these samples and taps, computing it first when the disk lacks it."""
        key = json.dumps({
            "target": model_fingerprint(target.name), "taps": list(taps), "dtype": str(target.dtype),
            "device": target.device.type, "format": CACHE_FORMAT,
            "sequences": hashlib.sha256(json.dumps([s.tokens for s in samples]).encode()).hexdigest(),
        }, sort_keys=True)
        folder = runtime.cache_dir() / "teacher" / hashlib.sha256(key.encode()).hexdigest()[:16]
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(folder.with_suffix(".lock")):  # trainers started together on the same data build it once
            if not (folder / "key.json").is_file():
                if show_progress:
                    tokens = sum(len(s.tokens) for s in samples)
                    say(f"scoring {len(samples)} training sequences ({tokens:,} tokens) with the target once "
                        f"(cached at {folder})")
                tmp = folder.with_suffix(".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
                _build(target, samples, tuple(taps), tmp, show_progress)
                (tmp / "key.json").write_text(key)
                shutil.rmtree(folder, ignore_errors=True)
                tmp.rename(folder)
        return cls(folder, samples, target)

    def batch(self, picks: list[int]) -> TeacherBatch:
        """The samples ``picks``, right-padded, with their features on the target's device and dtype."""
        rows = [self.samples[i] for i in picks]
        lengths = torch.tensor([len(r.tokens) for r in rows])  # (B,)
        b, t = len(rows), int(lengths.max())
        tokens = torch.zeros(b, t, dtype=torch.long)
        taps = torch.zeros(b, t, *self.taps.shape[1:])
        final = torch.zeros(b, t, self.final.shape[1])
        argmax = torch.zeros(b, t, dtype=torch.long)
        for row, (i, sample) in enumerate(zip(picks, rows, strict=True)):
            n, span = len(sample.tokens), slice(self.offsets[i], self.offsets[i + 1])
            tokens[row, :n] = torch.tensor(sample.tokens)
            taps[row, :n] = torch.from_numpy(np.array(self.taps[span]))
            final[row, :n] = torch.from_numpy(np.array(self.final[span]))
            argmax[row, :n] = torch.from_numpy(np.array(self.argmax[span], dtype=np.int64))
        prompts = torch.tensor([r.prompt_len for r in rows])
        to = {"device": self.device}
        return TeacherBatch(tokens.to(**to), lengths.to(**to), prompts.to(**to), taps.to(self.device, self.dtype),
                            final.to(self.device, self.dtype), argmax.to(**to))


def _build(target: TargetRunner, samples: list[Sample], taps: tuple[int, ...], folder: Path, show_progress: bool) -> None:
    """Score every sample with the target (batched by length) into the cache files of ``folder``."""
    lengths = [len(s.tokens) for s in samples]
    offsets = np.cumsum([0, *lengths])
    hidden = target.config.hidden_size
    out_taps = open_memmap(folder / "taps.npy", "w+", np.float32, (int(offsets[-1]), len(taps), hidden))
    out_final = open_memmap(folder / "final.npy", "w+", np.float32, (int(offsets[-1]), hidden))
    out_argmax = open_memmap(folder / "argmax.npy", "w+", np.int32, (int(offsets[-1]),))
    last = len(target.layers) - 1  # its output, normed, is the LM head's input
    order = sorted(range(len(samples)), key=lengths.__getitem__)
    groups, group = [], []
    for i in order:  # sorted by length: a group's widest row is its last
        if group and (len(group) + 1) * lengths[i] > SCORE_TOKENS:
            groups.append(group)
            group = []
        group.append(i)
    groups.append(group)
    with progress_steps("teacher", len(samples), show_progress) as advance, torch.inference_mode():
        for group in groups:
            out = target.score([samples[i].tokens for i in group], taps=(*taps, last))
            final = target.norm(out.hidden[:, :, -1])  # (B, N, H)
            argmax = out.logits.argmax(-1)  # (B, N)
            for row, i in enumerate(group):
                n, span = lengths[i], slice(offsets[i], offsets[i + 1])
                out_taps[span] = out.hidden[row, :n, :-1].float().cpu().numpy()
                out_final[span] = final[row, :n].float().cpu().numpy()
                out_argmax[span] = argmax[row, :n].cpu().numpy()
            advance(len(group))
    for array in (out_taps, out_final, out_argmax):
        array.flush()
